"""Source forms of the fixes: one small libcst transformer per fix.

Each codemod is a pure function ``rewrite_<fix>(source, lines, ...) -> Rewrite`` over one file's
text: it changes only the statements on the given (1-based) lines of the *old* source, keeps every
other byte (formatting and comments), and says for each targeted line either what it changed
(``notes``) or why it left it alone (``skipped``). A rewrite is idempotent: run on its own output
it changes nothing. Nothing here reads or writes files (:mod:`gpuopt.optimize.source_files` does).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider


class CodemodError(ValueError):
    """The source cannot be rewritten at all (it does not parse): a one-line reason."""


@dataclass(frozen=True)
class Skipped:
    """A targeted line the codemod left alone, and why (shown to the user as is)."""

    line: int
    reason: str


@dataclass
class Rewrite:
    """What one codemod did to one file's source."""

    source: str  # the new source; equal to the old one when nothing changed
    notes: list[str] = field(default_factory=list)  # "line 42: ..." one per change
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.notes)


def parse(source: str, name: str = "<source>") -> cst.Module:
    """The module's concrete syntax tree, or a :class:`CodemodError` naming the line."""
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise CodemodError(
            f"{name}: cannot be parsed at line {exc.raw_line}: {exc.message}"
        ) from None


def wrap(source: str, name: str = "<source>") -> MetadataWrapper:
    """The parsed module wrapped for position metadata (lines of the old source)."""
    return MetadataWrapper(parse(source, name))


def code(node: cst.CSTNode) -> str:
    """The source text of ``node`` on its own (for messages and comparisons of values)."""
    return cst.Module([]).code_for_node(node)


def is_literal(node: cst.BaseExpression) -> bool:
    """A value written out: a number (``-1`` and ``2.5`` too) or ``True``, ``False``, ``None``;
    a codemod replaces it, never an expression that computes a value."""
    if isinstance(node, (cst.Integer, cst.Float)):
        return True
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return True
    return isinstance(node, cst.UnaryOperation) and isinstance(
        node.expression, (cst.Integer, cst.Float)
    )


def is_import(stmt: cst.BaseStatement) -> bool:
    """A line of ``import ...`` or ``from ... import ...`` statements."""
    return isinstance(stmt, cst.SimpleStatementLine) and any(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
    )


def keyword(name: str, value: cst.BaseExpression) -> cst.Arg:
    """``name=value`` as PEP 8 writes a keyword argument (no spaces around ``=``)."""
    tight = cst.SimpleWhitespace("")
    return cst.Arg(
        value=value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(whitespace_before=tight, whitespace_after=tight),
    )


def append_arg(args: list[cst.Arg], new: cst.Arg) -> list[cst.Arg]:
    """``args`` with ``new`` last, on the same line: the old last argument gets ``, `` and the
    new one whatever closed the call before (a trailing comma stays trailing)."""
    if not args:
        return [new]
    trailing = args[-1].comma
    last = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return [*args[:-1], last, new.with_changes(comma=trailing)]


def append_before_close(args: list[cst.Arg], new: cst.Arg) -> list[cst.Arg]:
    """:func:`append_arg`, and what stood between the last argument and ``)`` (a line break
    before the closing parenthesis) now follows ``new``."""
    if not args:
        return [new]
    closing = args[-1].whitespace_after_arg
    tight = args[-1].with_changes(whitespace_after_arg=cst.SimpleWhitespace(""))
    out = append_arg([*args[:-1], tight], new)
    return [*out[:-1], out[-1].with_changes(whitespace_after_arg=closing)]


def on_lines(pos: CodeRange, lines: Collection[int]) -> bool:
    """Whether a node whose position is ``pos`` starts on one of ``lines``, or spans one
    (a statement continued over several lines is found by any of its lines)."""
    return any(pos.start.line <= ln <= pos.end.line for ln in lines)


__all__ = [
    "CodemodError",
    "MetadataWrapper",
    "PositionProvider",
    "Rewrite",
    "Skipped",
    "append_arg",
    "append_before_close",
    "code",
    "is_import",
    "is_literal",
    "keyword",
    "on_lines",
    "parse",
    "wrap",
]
