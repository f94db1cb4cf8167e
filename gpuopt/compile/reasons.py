"""Dynamo's words, read: graph-break types into kinds gpuopt has a fix for, a failed guard into
the guard and its values, resume-function names into the function they resume.

Dynamo's texts are not a stable interface; every reader here keeps what it cannot parse as it
is (a reason is never lost, only left unclassified).
"""

from __future__ import annotations

import re

RESUME_PREFIX = "torch_dynamo_resume_in_"
_RESUME = re.compile(r"^torch_dynamo_resume_in_(?P<name>.+)_at_(?P<line>\d+)$")
_COMPILE_ID = re.compile(r"^\s*\[?\d+/\d+\]?:\s*")
_EXPECTED = re.compile(r"\.\s*expected .*$")
_VALUE = re.compile(r"(==|!=|<=|>=|<|>)\s*-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
_FILE_LINE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')
_COMMENT_SITE = re.compile(r"#\s*(?P<file>\S+\.py):(?P<line>\d+)\b")

# (kind, test on the graph-break type and explanation) in order; the first that holds
_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("item", ("Tensor.item()",)),
    ("tolist", ("Tensor.tolist()",)),
    ("logging", ("logging.Logger", "logging function")),
    ("data-dependent-branch", ("Data-dependent branching",)),
    ("dynamic-shape-op", ("Dynamic shape operator", "data-dependent output shape")),
    ("disabled-call", ("torch.compiler.disable()",)),
    ("recompile-limit", ("recompile limit",)),
)


def break_kind(gb_type: str, explanation: str) -> str:
    """What kind of graph break this is: ``print``, ``item``, ``tolist``, ``logging``,
    ``data-dependent-branch``, ``dynamic-shape-op``, ``disabled-call``, ``recompile-limit``,
    ``builtin`` (another Python builtin Dynamo cannot trace) or ``unsupported``."""
    if "builtin operator `print`" in explanation or "builtin `print`" in explanation:
        return "print"
    for kind, needles in _KINDS:
        if any(n in gb_type for n in needles):
            return kind
    if gb_type.startswith("Failed to trace builtin operator"):
        return "builtin"
    return "unsupported"


# what Dynamo's DebuggingVariable.can_reorder_logs accepts of a reorderable logging function's
# arguments (a TensorVariable, a ConstantVariable, a StringFormatVariable), by the type names its
# "argument types [...]" explanation gives them; a tuple, a torch.Size, a list, an object: not
_REORDERABLE_ARGS = frozenset(
    {"Tensor", "Parameter", "Buffer", "str", "int", "float", "bool", "NoneType", "complex"}
)
_ARG_TYPES = re.compile(r"with argument types (?P<types>\[[^\]]*\]) \(has_kwargs (?P<kw>\w+)\)")


def reorderable_args(explanation: str) -> tuple[bool | None, list[str]]:
    """Whether Dynamo could reorder this call once its function is in
    ``torch._dynamo.config.reorderable_logging_functions``, from the argument types its
    explanation records (``['str', 'Tensor']``), and the types it could not: None when the
    explanation records none, False too when the call had keyword arguments (their types are
    not recorded)."""
    m = _ARG_TYPES.search(explanation)
    if m is None:
        return None, []
    types = re.findall(r"'([^']*)'", m.group("types"))
    refused = [t for t in types if t not in _REORDERABLE_ARGS]
    if m.group("kw") != "False":
        return False, [*refused, "keyword arguments"]
    return not refused, refused


def split_message(msg: str) -> tuple[str, str, list[str]]:
    """``(type, explanation, hints)`` of an Unsupported exception's message (its first line,
    the text after ``Explanation:`` up to the hints, each ``Hint:`` line)."""
    lines = [ln.strip() for ln in msg.splitlines()]
    gb_type = lines[0] if lines else ""
    explanation: list[str] = []
    hints: list[str] = []
    reading = False
    for ln in lines[1:]:
        if ln.startswith("Explanation:"):
            explanation.append(ln[len("Explanation:") :].strip())
            reading = True
        elif ln.startswith("Hint:"):
            hints.append(ln[len("Hint:") :].strip())
            reading = False
        elif not ln or ln.startswith(("Developer debug context", "For more details")):
            reading = False
        elif reading:
            explanation.append(ln)
    return gb_type, " ".join(explanation).strip(), hints


def resumed_function(name: str) -> tuple[str, int] | None:
    """``(function, line)`` a Dynamo resume function continues (``torch_dynamo_resume_in_
    forward_at_10`` → ``("forward", 10)``); None for any other name."""
    m = _RESUME.match(name)
    if not m:
        return None
    inner = m.group("name")
    while True:  # a resume of a resume names the outer one
        again = _RESUME.match(inner)
        if not again:
            return inner, int(m.group("line"))
        inner = again.group("name")


def guard_text(reason: str) -> str:
    """The reason's first line without its compile id (``0/0: ``) and without the source
    comment Dynamo appends (``  # return y * s  # t.py:14 in f``)."""
    first = reason.strip().splitlines()[0] if reason.strip() else ""
    first = _COMPILE_ID.sub("", first)
    if "  #" in first:
        first = first.split("  #", 1)[0]
    return first.strip()


def failed_guard(reason: str) -> str:
    """The guard that failed, without the values that changed: ``tensor 'x' size mismatch at
    index 1`` (from ``... at index 1. expected 8, actual 9``), ``s == …`` (from ``s ==
    2.52``): recompiles of one guard with different values are one cause."""
    g = _EXPECTED.sub("", guard_text(reason))
    return _VALUE.sub(lambda m: f"{m.group(1)} …", g).strip()


def guard_location(reason: str) -> tuple[str, int] | None:
    """``(file, line)`` of the user's code a guard comes from, where Dynamo's reason names it
    (its ``User stack trace`` or its source comment); None otherwise."""
    found = _FILE_LINE.findall(reason)
    if found:
        file, line = found[-1]
        return file, int(line)
    m = _COMMENT_SITE.search(reason.splitlines()[0] if reason else "")
    if m:
        return m.group("file"), int(m.group("line"))
    return None


def first_line(text: str | None, limit: int = 300) -> str:
    """The first non-empty line of ``text``, at most ``limit`` characters."""
    for ln in (text or "").splitlines():
        if ln.strip():
            s = ln.strip()
            return s if len(s) <= limit else s[: limit - 1] + "…"
    return ""
