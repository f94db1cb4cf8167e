"""The ``zero-grad`` fix's source form: ``zero_grad(set_to_none=False)`` → ``set_to_none=True``.

Zero-filling every gradient each step costs a kernel per parameter; ``set_to_none=True`` (torch's
default since 2.0) frees them instead. Safe only when nothing reads a gradient between
``zero_grad()`` and ``backward()`` — a ``None`` gradient is not a zero tensor. So when the module
reads any ``.grad`` attribute, every call is left alone and the line of that read is given.
"""

from __future__ import annotations

from collections.abc import Collection

import libcst as cst
import libcst.matchers as m

from gpuopt.optimize.codemods import PositionProvider, Rewrite, Skipped, keyword, on_lines, wrap

_FALSE = m.Name("False")
_CALL = m.Call(func=m.Attribute(attr=m.Name("zero_grad")))


def _false_arg(call: cst.Call) -> int | None:
    """Index of the argument that says ``set_to_none=False`` (by keyword or first position)."""
    for i, a in enumerate(call.args):
        if (
            a.keyword is not None
            and a.keyword.value == "set_to_none"
            and m.matches(a.value, _FALSE)
        ):
            return i
        if i == 0 and a.keyword is None and not a.star and m.matches(a.value, _FALSE):
            return i
    return None


class _Finder(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.grad_reads: list[int] = []

    def visit_Call(self, node: cst.Call) -> None:
        if m.matches(node, _CALL) and _false_arg(node) is not None:
            self.calls.append(self.get_metadata(PositionProvider, node).start.line)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "grad":
            self.grad_reads.append(self.get_metadata(PositionProvider, node).start.line)


class _Setter(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, lines: Collection[int] | None) -> None:
        self.lines = lines
        self.notes: list[str] = []

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        if not m.matches(original, _CALL):
            return updated
        i = _false_arg(original)
        pos = self.get_metadata(PositionProvider, original)
        if i is None or (self.lines is not None and not on_lines(pos, self.lines)):
            return updated
        args = list(updated.args)
        args[i] = keyword("set_to_none", cst.Name("True")).with_changes(comma=args[i].comma)
        self.notes.append(f"line {pos.start.line}: zero_grad(set_to_none=True)")
        return updated.with_changes(args=args)


def _find(source: str, name: str) -> _Finder:
    finder = _Finder()
    wrap(source, name).visit(finder)
    return finder


def find_zero_grad_false(source: str, name: str = "<source>") -> list[int]:
    """Lines of ``zero_grad(set_to_none=False)`` calls (for planning)."""
    return _find(source, name).calls


def rewrite_zero_grad(
    source: str, lines: Collection[int] | None = None, name: str = "<source>"
) -> Rewrite:
    finder = _find(source, name)
    targets = [ln for ln in finder.calls if lines is None or ln in lines]
    if targets and finder.grad_reads:
        first = finder.grad_reads[0]
        why = (
            f"gradients are read at line {first}: with set_to_none=True they would be None, "
            "not zeros"
        )
        return Rewrite(source, [], [Skipped(ln, why) for ln in targets])
    setter = _Setter(lines)
    new = wrap(source, name).visit(setter)
    return Rewrite(new.code, setter.notes, [])
