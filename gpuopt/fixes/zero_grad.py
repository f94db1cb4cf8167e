"""The ``zero-grad`` fix's source form: ``zero_grad(set_to_none=False)`` → ``set_to_none=True``.

Zero-filling every gradient each step costs a kernel per parameter; ``set_to_none=True`` (torch's
default since 2.0) frees them instead. The calls rewritten are ``X.zero_grad(set_to_none=False)``
and ``X.zero_grad(False)``, on the targeted lines (a call spanning several lines is found by any
of them) or anywhere in the module when no lines are given.

Safety rules: the rewrite is right only when nothing reads a gradient between ``zero_grad()`` and
``backward()`` — a ``None`` gradient is not a zero tensor (``p.grad.norm()`` would fail, ``if
p.grad is None`` would change branch). So when the module reads any ``.grad`` attribute
(anything but assigning or deleting it, or calling a function named ``grad`` such as
``torch.autograd.grad``), every call is left alone and each gets a :class:`Skipped` naming the
first line that reads one. A targeted line with no ``zero_grad`` call, or whose ``set_to_none``
comes from an expression, is reported too.

Its plan (:func:`plan`): the script's ``zero_grad(set_to_none=False)`` calls, found in its
source (the fix has no finding).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from gpuopt.debug import logger
from gpuopt.fixes.kind import FixKind
from gpuopt.fixes.planned import PlanInput, PlannedFix, SourceEdit, for_lines
from gpuopt.source import (
    CodemodError,
    PositionProvider,
    Rewrite,
    Skipped,
    code,
    keyword,
    on_lines,
    wrap,
)

KIND = FixKind(
    "zero-grad",
    "optimizer.zero_grad(set_to_none=True) where it is set to False",
    (),
    runtime=False,
    source=True,
)

log = logger(__name__)

_FALSE = m.Name("False")
_TRUE = m.Name("True")
_CALL = m.Call(func=m.Attribute(attr=m.Name("zero_grad")))
_GRAD = m.Attribute(attr=m.Name("grad"))


def _flag_arg(call: cst.Call) -> int | None:
    """Index of the argument that is ``set_to_none`` (by keyword or first position)."""
    for i, a in enumerate(call.args):
        if a.keyword is not None and a.keyword.value == "set_to_none":
            return i
        if i == 0 and a.keyword is None and not a.star:
            return i
    return None


def _false_arg(call: cst.Call) -> int | None:
    """Index of the argument that says ``set_to_none=False``, or None."""
    i = _flag_arg(call)
    return i if i is not None and m.matches(call.args[i].value, _FALSE) else None


@dataclass(frozen=True)
class _Site:
    """One ``zero_grad(...)`` call: where it is, and what it does to the gradients."""

    start: int
    end: int
    state: str  # "false" (to rewrite), "frees" (nothing to do), or the reason it is left


def _state(call: cst.Call) -> str:
    i = _flag_arg(call)
    if i is None or m.matches(call.args[i].value, _TRUE):
        return "frees"
    value = call.args[i].value
    if m.matches(value, _FALSE):
        return "false"
    return f"set_to_none comes from `{code(value)}`: set it to True where that is set"


class _Finder(cst.CSTVisitor):
    """The ``zero_grad`` calls, and the lines that read a ``.grad`` attribute."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        self.sites: list[_Site] = []
        self.grad_reads: list[int] = []
        self._not_reads: set[int] = set()  # ids of .grad nodes written, deleted or called

    def visit_Call(self, node: cst.Call) -> None:
        if m.matches(node.func, _GRAD):
            self._not_reads.add(id(node.func))  # torch.autograd.grad(...): a function
        if m.matches(node, _CALL):
            pos = self.get_metadata(PositionProvider, node)
            self.sites.append(_Site(pos.start.line, pos.end.line, _state(node)))

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        if m.matches(node.target, _GRAD):
            self._not_reads.add(id(node.target))  # p.grad = None

    def visit_Del(self, node: cst.Del) -> None:
        if m.matches(node.target, _GRAD):
            self._not_reads.add(id(node.target))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == "grad" and id(node) not in self._not_reads:
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
        args[i] = keyword("set_to_none", cst.Name("True")).with_changes(
            comma=args[i].comma, whitespace_after_arg=args[i].whitespace_after_arg
        )
        self.notes.append(f"line {pos.start.line}: zero_grad(set_to_none=True)")
        return updated.with_changes(args=args)


def _find(source: str, name: str) -> _Finder:
    finder = _Finder()
    wrap(source, name).visit(finder)
    return finder


def find_zero_grad_false(source: str, name: str = "<source>") -> list[int]:
    """Lines of ``zero_grad(set_to_none=False)`` / ``zero_grad(False)`` calls (where each
    starts), for planning."""
    return [s.start for s in _find(source, name).sites if s.state == "false"]


def _line_skips(sites: list[_Site], lines: Collection[int]) -> list[Skipped]:
    """A reason for each targeted line with no call to rewrite and none already freeing."""
    out: list[Skipped] = []
    for ln in sorted(set(lines)):
        here = [s for s in sites if s.start <= ln <= s.end]
        if any(s.state in ("false", "frees") for s in here):
            continue
        reasons = [s.state for s in here] or ["no zero_grad(...) call on this line"]
        out.append(Skipped(ln, reasons[0]))
    return out


def _target_line(site: _Site, lines: Collection[int] | None) -> int | None:
    """The line a skip of ``site`` is reported on: its first targeted line (its own first line
    when every call is targeted), or None when it is not targeted."""
    if lines is None:
        return site.start
    return min((ln for ln in lines if site.start <= ln <= site.end), default=None)


def rewrite_zero_grad(
    source: str, lines: Collection[int] | None = None, name: str = "<source>"
) -> Rewrite:
    """``set_to_none=True`` on the ``zero_grad(set_to_none=False)`` calls on ``lines`` (all of
    them when ``lines`` is None), unless the module reads gradients (see the module doc)."""
    finder = _find(source, name)
    skipped = [] if lines is None else _line_skips(finder.sites, lines)
    found = (_target_line(s, lines) for s in finder.sites if s.state == "false")
    targets = [ln for ln in found if ln is not None]
    if targets and finder.grad_reads:
        first = min(finder.grad_reads)
        why = (
            f"gradients are read at line {first}: with set_to_none=True they would be None, "
            "not zeros"
        )
        return Rewrite(source, [], skipped + [Skipped(ln, why) for ln in targets])
    if not targets:
        return Rewrite(source, [], skipped)
    setter = _Setter(lines)
    new = wrap(source, name).visit(setter)
    return Rewrite(new.code, setter.notes, skipped)


def zero_grad_lines(inp: PlanInput) -> list[int]:
    """The script's ``zero_grad(set_to_none=False)`` lines (none for ``-m MODULE``, or a
    script libcst cannot read)."""
    if inp.script_text is None:
        return []
    try:
        return find_zero_grad_false(inp.script_text)
    except CodemodError as exc:
        log.debug("zero_grad calls not read: %s", exc)
        return []


def plan(kind: FixKind, inp: PlanInput) -> PlannedFix:
    lines = zero_grad_lines(inp)
    fix = PlannedFix(kind, False, bool(lines), "")
    if not lines or inp.script_path is None:
        fix.reason = "no zero_grad(set_to_none=False) in the script"
        return fix
    path = inp.script_path
    fix.sites = [f"{path}:{n}" for n in lines]
    fix.reason = "gradients are zero-filled every step instead of freed"
    fix.edits = [SourceEdit(path, lines, for_lines(rewrite_zero_grad, lines))]
    return fix
