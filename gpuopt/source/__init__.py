"""Python source read and rewritten with libcst: the ``Rewrite`` every fix's codemod returns.

Each codemod is a pure function ``rewrite_<fix>(source, lines, ...) -> Rewrite`` over one file's
text: it changes only the statements on the given (1-based) lines of the *old* source, keeps every
other byte (formatting and comments), and says for each targeted line either what it changed
(``notes``) or why it left it alone (``skipped``). A rewrite is idempotent: run on its own output
it changes nothing. Nothing here reads or writes files
(:mod:`gpuopt.optimize.output.source_files` does).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m
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


def _line_break(call: cst.Call, args: list[cst.Arg]) -> cst.ParenthesizedWhitespace | None:
    """The whitespace that puts one argument on its own line, when the call's arguments are
    one a line (else None: new ones are appended on the last argument's line)."""
    if len(args) == 1 and isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace):
        return call.whitespace_before_args.with_changes(first_line=cst.TrailingWhitespace())
    if len(args) < 2:
        return None
    for a in args[:-1]:
        if not (
            isinstance(a.comma, cst.Comma)
            and isinstance(a.comma.whitespace_after, cst.ParenthesizedWhitespace)
        ):
            return None
    sep = args[-2].comma
    assert isinstance(sep, cst.Comma) and isinstance(
        sep.whitespace_after, cst.ParenthesizedWhitespace
    )
    return sep.whitespace_after.with_changes(first_line=cst.TrailingWhitespace())


def _append_on_own_line(
    args: list[cst.Arg], new: cst.Arg, line_break: cst.ParenthesizedWhitespace
) -> list[cst.Arg]:
    """``new`` on a line of its own, indented as the others; the last argument's own comment
    stays on its line, and whatever closed the call (a trailing comma, the line before ``)``)
    moves to ``new``."""
    last = args[-1]
    if isinstance(last.comma, cst.Comma):  # a trailing comma: the new one gets one too
        ws = last.comma.whitespace_after
        own = isinstance(ws, cst.ParenthesizedWhitespace)
        first = ws.first_line if isinstance(ws, cst.ParenthesizedWhitespace) else None
        last = last.with_changes(
            comma=last.comma.with_changes(
                whitespace_after=line_break.with_changes(
                    first_line=first or cst.TrailingWhitespace()
                )
            )
        )
        end = ws.with_changes(first_line=cst.TrailingWhitespace()) if own else ws
        return [*args[:-1], last, new.with_changes(comma=cst.Comma(whitespace_after=end))]
    after = last.whitespace_after_arg
    comment = (
        after.first_line
        if isinstance(after, cst.ParenthesizedWhitespace)
        else cst.TrailingWhitespace()
    )
    last = last.with_changes(
        comma=cst.Comma(whitespace_after=line_break.with_changes(first_line=comment)),
        whitespace_after_arg=cst.SimpleWhitespace(""),
    )
    closing: cst.BaseParenthesizableWhitespace = (
        after.with_changes(first_line=cst.TrailingWhitespace())
        if isinstance(after, cst.ParenthesizedWhitespace)
        else after
    )
    return [*args[:-1], last, new.with_changes(whitespace_after_arg=closing)]


def add_argument(call: cst.Call, args: list[cst.Arg], new: cst.Arg) -> list[cst.Arg]:
    """``args`` (the arguments ``call`` will have) with ``new`` added in the call's own layout:
    on a line of its own, indented as the others, when the arguments are one a line (the
    trailing-comma style kept), else appended after the last one (:func:`append_before_close`)."""
    line_break = _line_break(call, args)
    if line_break is None:
        return append_before_close(args, new)
    return _append_on_own_line(args, new, line_break)


_MAIN_GUARD = m.If(
    test=m.Comparison(
        left=m.Name("__name__"),
        comparisons=[
            m.ComparisonTarget(
                operator=m.Equal(),
                comparator=m.SimpleString('"__main__"') | m.SimpleString("'__main__'"),
            )
        ],
    )
)


def _is_docstring(stmt: cst.BaseStatement) -> bool:
    return m.matches(
        stmt,
        m.SimpleStatementLine(body=[m.Expr(value=m.SimpleString() | m.ConcatenatedString())]),
    )


def after_imports(body: Sequence[cst.BaseStatement]) -> int:
    """Where a statement goes after a module's imports: the index after the last top-level
    import before ``if __name__ == "__main__":`` (never inside it), else after the docstring
    (a concatenated one too), else 0."""
    at = 1 if body and _is_docstring(body[0]) else 0
    for i, stmt in enumerate(body):
        if m.matches(stmt, _MAIN_GUARD):
            break
        if is_import(stmt):
            at = i + 1
    return at


def binds_torch(stmt: cst.BaseStatement) -> bool:
    """``import torch`` or ``import torch.x`` (either binds the name ``torch``)."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    return any(
        isinstance(s, cst.Import)
        and any(a.asname is None and code(a.name).split(".")[0] == "torch" for a in s.names)
        for s in stmt.body
    )


def insert_after_imports(module: cst.Module, lines: Sequence[str], notes: list[str]) -> cst.Module:
    """``module`` with the statements ``lines`` after its imports (:func:`after_imports`),
    ``import torch`` before them where the imports do not bind ``torch``; each added line said
    in ``notes`` with its line number."""
    body = list(module.body)
    at = after_imports(body)
    added = [] if any(binds_torch(s) for s in body[:at]) else ["import torch\n"]
    added += lines
    stmts = [cst.parse_statement(t) for t in added]
    before = module.with_changes(body=body[:at], footer=(), has_trailing_newline=True)
    first = (before.code.count("\n") if at else len(module.header)) + 1
    where = "after the imports" if any(is_import(s) for s in body[:at]) else "at the top"
    for n, text in enumerate(added):
        notes.append(f"line {first + n}: {text.strip()} (added {where})")
    return module.with_changes(body=[*body[:at], *stmts, *body[at:]])


def on_lines(pos: CodeRange, lines: Collection[int]) -> bool:
    """Whether a node whose position is ``pos`` starts on one of ``lines``, or spans one
    (a statement continued over several lines is found by any of its lines)."""
    return any(pos.start.line <= ln <= pos.end.line for ln in lines)


__all__ = [
    "after_imports",
    "add_argument",
    "CodemodError",
    "MetadataWrapper",
    "PositionProvider",
    "Rewrite",
    "Skipped",
    "append_arg",
    "append_before_close",
    "binds_torch",
    "code",
    "is_import",
    "insert_after_imports",
    "is_literal",
    "keyword",
    "on_lines",
    "parse",
    "wrap",
]
