"""The ``pinned-copies`` fix's source form: ``non_blocking=True`` on host-to-device copies.

On the targeted lines (the profile's blocking host-to-device copy sites), every ``.to(...)`` with
an argument and every ``.cuda(...)`` gets ``non_blocking=True``: added as a keyword, or an
explicit ``False`` (by keyword, or the positional flag as in ``.cuda(0, False)``) turned into
``True``. From pinned memory the copy then overlaps the GPU's work; the stream keeps it ordered
before the kernels that read it, so nothing else changes.

Safety rules, each a :class:`Skipped` with its reason:

* ``.to(<dtype>)`` (``torch.float16``, ``torch.long``, a name ending in ``dtype``, or only a
  ``dtype=`` keyword) is left: it converts the dtype, it copies nothing between devices;
* a copy to the CPU (``.to("cpu")``, ``.to(torch.device("cpu"))``, ``device="cpu"``) is left:
  a non-blocking device-to-host copy may be read before it has landed;
* a ``non_blocking=`` whose value is an expression is left (the reason says where to set it),
  and so is a call whose arguments come from a ``*args``/``**kwargs`` splat.

Only calls on the targeted lines are touched; a targeted line with no such copy is reported.
Note that ``nn.Module.cuda()`` takes no ``non_blocking`` (``Module.to`` does): the targeted
lines are tensor copy sites.
"""

from __future__ import annotations

from collections.abc import Collection

import libcst as cst
import libcst.matchers as m

from gpuopt.source import (
    PositionProvider,
    Rewrite,
    Skipped,
    append_before_close,
    code,
    keyword,
    wrap,
)

_DTYPES = frozenset(
    {
        "float",
        "float16",
        "float32",
        "float64",
        "bfloat16",
        "half",
        "double",
        "cfloat",
        "cdouble",
        "chalf",
        "int",
        "int8",
        "int16",
        "int32",
        "int64",
        "long",
        "short",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "bool",
        "complex32",
        "complex64",
        "complex128",
        "float8_e4m3fn",
        "float8_e5m2",
    }
)
_COPY = m.Attribute(attr=m.Name("to") | m.Name("cuda"))
_TRUE = m.Name("True")
_FLAG = m.Name("True") | m.Name("False")


def _is_dtype(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.Attribute) and m.matches(node.value, m.Name("torch")):
        return node.attr.value in _DTYPES
    if isinstance(node, cst.Attribute):  # x.dtype, self.compute_dtype
        return node.attr.value.endswith("dtype")
    return isinstance(node, cst.Name) and node.value.endswith("dtype")


def _is_cpu(node: cst.BaseExpression) -> bool:
    """``"cpu"`` (or ``"cpu:0"``), or ``torch.device("cpu")``."""
    if isinstance(node, cst.SimpleString):
        text = node.evaluated_value
        return isinstance(text, str) and (text == "cpu" or text.startswith("cpu:"))
    if m.matches(node, m.Call(func=m.Attribute(attr=m.Name("device")) | m.Name("device"))):
        assert isinstance(node, cst.Call)
        return bool(node.args) and _is_cpu(node.args[0].value)
    return False


def _kw(call: cst.Call, key: str) -> int | None:
    for i, a in enumerate(call.args):
        if a.keyword is not None and a.keyword.value == key:
            return i
    return None


def _positional(call: cst.Call) -> list[int]:
    return [i for i, a in enumerate(call.args) if a.keyword is None and not a.star]


def _leave_alone(call: cst.Call, method: str) -> str | None:
    """Why this ``.to``/``.cuda`` call gets no ``non_blocking``: ``"dtype"`` for a dtype
    conversion (no copy at all), else a user's reason; None when it is a copy to set."""
    if any(a.star for a in call.args):
        return (
            f"the .{method}(...) arguments come from a splat: pass non_blocking=True "
            "where they are built"
        )
    if method == "cuda":
        return None
    positional = _positional(call)
    device_kw = _kw(call, "device")
    first = call.args[positional[0]].value if positional else None
    if device_kw is None and (
        (first is not None and _is_dtype(first))
        or (first is None and _kw(call, "dtype") is not None)
    ):
        return "dtype"
    target = call.args[device_kw].value if device_kw is not None else first
    if target is not None and _is_cpu(target):
        return (
            f"`.to({code(target)})` copies to the CPU: with non_blocking=True the result "
            "could be read before it arrives, so it stays blocking"
        )
    return None


def _flag_index(call: cst.Call, method: str) -> int | None:
    """The argument that is ``non_blocking``: its keyword, or the positional flag
    (``.cuda(device, non_blocking)``; for ``.to`` the first positional True/False)."""
    at = _kw(call, "non_blocking")
    if at is not None:
        return at
    positional = _positional(call)
    if method == "cuda":
        return positional[1] if len(positional) > 1 else None
    for i in positional[1:]:
        if m.matches(call.args[i].value, _FLAG):
            return i
    return None


class _Copies(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, lines: Collection[int]) -> None:
        self.lines = sorted(set(lines))
        self.notes: list[str] = []
        self.skipped: list[Skipped] = []
        self.found: set[int] = set()
        self.dtype_only: dict[int, str] = {}

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if not m.matches(original.func, _COPY):
            return updated
        assert isinstance(original.func, cst.Attribute)
        method = original.func.attr.value
        if method == "to" and not original.args:
            return updated
        pos = self.get_metadata(PositionProvider, original)
        hit = [ln for ln in self.lines if pos.start.line <= ln <= pos.end.line]
        if not hit:
            return updated
        why = _leave_alone(original, method)
        if why == "dtype":
            for ln in hit:
                self.dtype_only.setdefault(ln, _dtype_reason(original))
            return updated
        self.found.update(hit)
        if why is not None:
            self.skipped.append(Skipped(hit[0], why))
            return updated
        return self._set(updated, method, pos.start.line, hit[0])

    def _set(self, call: cst.Call, method: str, line: int, target: int) -> cst.Call:
        at = _flag_index(call, method)
        note = f"line {line}: .{method}(..., non_blocking=True)"
        if at is None:
            self.notes.append(note)
            new = keyword("non_blocking", cst.Name("True"))
            return call.with_changes(args=append_before_close(list(call.args), new))
        value = call.args[at].value
        if m.matches(value, _TRUE):
            return call
        if not m.matches(value, _FLAG):
            self.skipped.append(
                Skipped(
                    target,
                    f"non_blocking comes from `{code(value)}`: set it to True where that is set",
                )
            )
            return call
        args = list(call.args)
        args[at] = args[at].with_changes(value=cst.Name("True"))
        self.notes.append(note)
        return call.with_changes(args=args)


def _dtype_reason(call: cst.Call) -> str:
    inside = ", ".join(code(a.value) for a in call.args if a.keyword is None)
    inside = inside or ", ".join(code(a) for a in call.args)
    return (
        f"`.to({inside})` converts the dtype and copies nothing between devices: "
        "non_blocking does not apply"
    )


def rewrite_copies(source: str, lines: Collection[int], name: str = "<source>") -> Rewrite:
    """``non_blocking=True`` on the ``.to(...)``/``.cuda(...)`` copies on ``lines`` (see the
    module doc)."""
    copies = _Copies(lines)
    new = wrap(source, name).visit(copies)
    skipped = list(copies.skipped)
    skipped += [
        Skipped(ln, copies.dtype_only.get(ln, "no .to(device) / .cuda() copy on this line"))
        for ln in sorted(set(lines))
        if ln not in copies.found
    ]
    return Rewrite(new.code, copies.notes, skipped)
