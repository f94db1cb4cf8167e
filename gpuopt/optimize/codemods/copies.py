"""The ``pinned-copies`` fix's source form: ``non_blocking=True`` on host-to-device copies.

On the targeted lines (the profile's blocking host-to-device copy sites), every ``.to(...)`` with
an argument and every ``.cuda(...)`` gets ``non_blocking=True`` (an explicit ``False`` becomes
``True``). From pinned memory the copy then overlaps the GPU's work; the stream keeps it ordered
before the kernels that read it, so nothing else changes. Left alone: ``.to(dtype)`` (no copy
between devices) and copies to the CPU (reading a device-to-host result before it lands would be
wrong without a sync).
"""

from __future__ import annotations

from collections.abc import Collection

import libcst as cst
import libcst.matchers as m

from gpuopt.optimize.codemods import (
    PositionProvider,
    Rewrite,
    Skipped,
    append_arg,
    keyword,
    on_lines,
    wrap,
)

_DTYPES = {
    "float",
    "float16",
    "float32",
    "float64",
    "bfloat16",
    "half",
    "double",
    "int",
    "int8",
    "int16",
    "int32",
    "int64",
    "long",
    "short",
    "uint8",
    "bool",
    "complex64",
    "complex128",
}
_TO_CPU = (
    m.SimpleString(value='"cpu"')
    | m.SimpleString(value="'cpu'")
    | m.Call(
        func=m.Attribute(attr=m.Name("device")),
        args=[m.Arg(value=m.SimpleString(value='"cpu"') | m.SimpleString(value="'cpu'"))],
    )
)


def _is_dtype(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.Attribute) and m.matches(node.value, m.Name("torch")):
        return node.attr.value in _DTYPES
    return isinstance(node, cst.Name) and node.value.endswith("dtype")


class _Copies(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, lines: Collection[int]) -> None:
        self.lines = lines
        self.notes: list[str] = []
        self.skipped: list[Skipped] = []
        self.found: set[int] = set()

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        method = m.matches(original.func, m.Attribute(attr=m.Name("to") | m.Name("cuda")))
        if not method:
            return updated
        pos = self.get_metadata(PositionProvider, original)
        if not on_lines(pos, self.lines):
            return updated
        assert isinstance(original.func, cst.Attribute)
        name = original.func.attr.value
        line = pos.start.line
        positional = [a for a in original.args if a.keyword is None and not a.star]
        if name == "to" and not original.args:
            return updated
        if name == "to" and positional and _is_dtype(positional[0].value) and len(positional) == 1:
            return updated
        self.found.add(line)
        if name == "to" and positional and m.matches(positional[0].value, _TO_CPU):
            self.skipped.append(
                Skipped(line, "a copy to the CPU stays blocking (read right after)")
            )
            return updated
        return self._set(updated, name, line)

    def _set(self, call: cst.Call, name: str, line: int) -> cst.Call:
        args = list(call.args)
        for i, a in enumerate(args):
            if a.keyword is not None and a.keyword.value == "non_blocking":
                if m.matches(a.value, m.Name("True")):
                    return call
                args[i] = a.with_changes(value=cst.Name("True"))
                self.notes.append(f"line {line}: .{name}(..., non_blocking=True)")
                return call.with_changes(args=args)
        self.notes.append(f"line {line}: .{name}(..., non_blocking=True)")
        return call.with_changes(args=append_arg(args, keyword("non_blocking", cst.Name("True"))))


def rewrite_copies(source: str, lines: Collection[int], name: str = "<source>") -> Rewrite:
    copies = _Copies(lines)
    new = wrap(source, name).visit(copies)
    skipped = list(copies.skipped)
    skipped += [
        Skipped(ln, "no .to(device) / .cuda() copy on this line")
        for ln in lines
        if ln not in copies.found
    ]
    return Rewrite(new.code, copies.notes, skipped)
