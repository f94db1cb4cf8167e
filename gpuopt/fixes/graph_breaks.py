"""The ``graph-breaks`` fix's source form: a logging line inside a compiled function moved to the
end of the function, just before its ``return``.

A ``print(...)``, a logging call or a ``.item()`` read inside a compiled function is a graph
break: Dynamo compiles the code before it and the code after it as separate graphs, with the
line run eagerly between them, so the two halves are never fused. Moved down to just before the
function's final ``return``, the same line prints the same values and the break falls after all
of the function's tensor work: one graph instead of two.

A line is moved only where that cannot change what it reads or what the rest reads:

* it is a statement of the function's own body (not inside an ``if``/``for``/``with``/``try``),
  and the function ends with a ``return``;
* the statements it jumps over assign nothing it reads (names, and ``self.x`` attributes), read
  nothing it assigns, and hold no ``print``/logging of their own (the output order stays);
* statements after it that read what it assigns (``stat = h.mean().item()`` then
  ``self.last_stat = stat``) move with it, under the same rules;
* an in-place method (``h.add_(1)``) changes ``h``; a ``yield``, ``del``,
  ``global``/``nonlocal``, a nested function, or a ``.backward()`` / ``.step()`` /
  ``.zero_grad()`` call (they change tensors in place) in between stops the move.

What Python cannot show is not seen: a function that changes a tensor it is given in place
(``fill(h)``) is read as reading ``h`` only.

Every other targeted line is left alone with its reason (:class:`Skipped`). Idempotent: a moved
line sits just before the ``return``, where there is nothing left to jump over.

Its plan (:func:`plan`): the graph breaks of the findings at a print, a logging call or an
``.item()`` read.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from gpuopt.fixes.kind import FixKind
from gpuopt.fixes.planned import (
    PlanInput,
    PlannedFix,
    SourceEdit,
    by_file,
    findings_named,
    for_lines,
)
from gpuopt.source import PositionProvider, Rewrite, Skipped, wrap

KIND = FixKind(
    "graph-breaks",
    "a print, logging call or .item() read inside a torch.compile'd function moved to the "
    "end of the function, before its return: the graph break falls after the tensor work",
    ("graph-break",),
    runtime=False,
    source=True,
    tolerance=1e-3,  # one graph instead of two: the backend may fuse (and round) differently
    settle_steps=3,  # every run compiles first
)

MOVABLE_KINDS = ("print", "logging", "item", "tolist")  # graph-break kinds this fix moves
_LOGGING_ROOTS = ("logging", "logger", "log", "LOGGER", "LOG", "_logger", "_log", "wandb")
_LOGGING_METHODS = ("debug", "info", "warning", "warn", "error", "critical", "exception", "log")
_BARRIERS = (cst.Del, cst.Global, cst.Nonlocal)
_MUTATING_CALLS = ("backward", "step", "zero_grad")  # change parameters and gradients in place


def _dotted(node: cst.BaseExpression) -> str | None:
    """``a``, ``a.b``, ``self.x.y`` as text; None for anything else (calls, subscripts)."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr.value}" if inner is not None else None
    return None


def is_logging_call(node: cst.BaseExpression) -> bool:
    """``print(...)``, ``logging.info(...)``, ``logger.warning(...)``, ``log.debug(...)``."""
    if not isinstance(node, cst.Call):
        return False
    name = _dotted(node.func)
    if name is None:
        return False
    if name == "print":
        return True
    parts = name.split(".")
    return len(parts) >= 2 and parts[-1] in _LOGGING_METHODS and parts[-2] in _LOGGING_ROOTS


@dataclass
class _Effects:
    """What a statement reads and writes: names and dotted attributes (``self.x``)."""

    reads: set[str]
    writes: set[str]
    logs: bool  # holds a print / logging call
    barrier: str | None  # why nothing may move across it (a yield, del, nested def...)


class _Scan(cst.CSTVisitor):
    def __init__(self) -> None:
        self.reads: set[str] = set()
        self.writes: set[str] = set()
        self.logs = False
        self.barrier: str | None = None

    def _target(self, node: cst.BaseExpression) -> None:
        if isinstance(node, (cst.Tuple, cst.List)):
            for el in node.elements:
                self._target(el.value)
            return
        if isinstance(node, cst.StarredElement):
            self._target(node.value)
            return
        name = _dotted(node)
        if name is not None:
            self.writes.add(name)
            if "." in name:  # self.x = ...: reads self
                self.reads.add(name.split(".")[0])
        elif isinstance(node, cst.Subscript):  # x[i] = ...: writes x (in place)
            base = _dotted(node.value)
            if base is not None:
                self.writes.add(base)
            node.visit(self)

    def visit_Assign(self, node: cst.Assign) -> bool:
        for t in node.targets:
            self._target(t.target)
        node.value.visit(self)
        return False

    def visit_AugAssign(self, node: cst.AugAssign) -> bool:
        self._target(node.target)
        node.target.visit(self)
        node.value.visit(self)
        return False

    def visit_AnnAssign(self, node: cst.AnnAssign) -> bool:
        self._target(node.target)
        if node.value is not None:
            node.value.visit(self)
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        name = _dotted(node)
        if name is not None:
            self.reads.add(name)  # self.head: not self.last (a prefix test finds self.head.w)
            return False
        return True

    def visit_Name(self, node: cst.Name) -> None:
        self.reads.add(node.value)

    def visit_Call(self, node: cst.Call) -> None:
        if is_logging_call(node):
            self.logs = True
        func = node.func
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            base = _dotted(func.value)
            # x.add_(1), x.copy_(y): torch's in-place methods change x
            if base is not None and method.endswith("_") and not method.startswith("_"):
                self.writes.add(base)
            if method in _MUTATING_CALLS:
                self.barrier = f"a .{method}() call (it changes tensors in place)"

    def visit_Yield(self, node: cst.Yield) -> None:
        self.barrier = "a yield"

    def visit_Await(self, node: cst.Await) -> None:
        self.barrier = "an await"

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._target(node.target)

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.barrier = "a nested function"
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.barrier = "a nested class"
        return False


def _effects(stmt: cst.BaseStatement) -> _Effects:
    scan = _Scan()
    stmt.visit(scan)
    if isinstance(stmt, cst.SimpleStatementLine) and any(
        isinstance(s, _BARRIERS) for s in stmt.body
    ):
        scan.barrier = "a del/global/nonlocal"
    if isinstance(stmt, (cst.For, cst.While, cst.With)) and _binds(stmt):
        scan.writes |= _binds(stmt)
    return _Effects(scan.reads, scan.writes, scan.logs, scan.barrier)


def _binds(stmt: cst.BaseStatement) -> set[str]:
    """Names a compound statement binds in its header (``for i in``, ``with ... as f``)."""
    out: set[str] = set()
    if isinstance(stmt, cst.For):
        scan = _Scan()
        scan._target(stmt.target)
        out |= scan.writes
    if isinstance(stmt, cst.With):
        for item in stmt.items:
            if item.asname is not None:
                scan = _Scan()
                scan._target(item.asname.name)
                out |= scan.writes
    return out


def _overlaps(a: set[str], b: set[str]) -> str | None:
    """A name of ``a`` that is in ``b``, or whose attribute is (``self`` vs ``self.x``)."""
    for x in sorted(a):
        for y in b:
            if x == y or y.startswith(x + ".") or x.startswith(y + "."):
                return x
    return None


def _is_final_return(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and any(
        isinstance(s, cst.Return) for s in stmt.body
    )


def _plan_move(body: Sequence[cst.BaseStatement], i: int) -> tuple[list[int], str | None]:
    """The indices of the statements that move with ``body[i]`` to just before the final
    return, or ``([], why not)``."""
    if not body or not _is_final_return(body[-1]):
        return [], "the function does not end with a return"
    end = len(body) - 1
    if i >= end - 1:
        return [], "already at the end of the function"
    moving = [i]
    moved = _effects(body[i])
    if moved.barrier:
        return [], f"it holds {moved.barrier}"
    reads, writes = set(moved.reads), set(moved.writes)
    for j in range(i + 1, end):
        e = _effects(body[j])
        if e.barrier:
            return [], f"line with {e.barrier} in between"
        depends = _overlaps(writes, e.reads)
        if depends and isinstance(body[j], cst.SimpleStatementLine):
            moving.append(j)  # reads what the moved lines assign: moves with them
            reads |= e.reads
            writes |= e.writes
            continue
        if depends:
            return [], f"`{depends}` is read by a compound statement in between"
        clash = _overlaps(e.writes, reads) or _overlaps(e.writes, writes)
        if clash:
            return [], f"`{clash}` is changed in between: moving it would log another value"
        if e.logs:
            return [], "another print/logging call in between: the output order would change"
    if moving == list(range(i, end)):
        return [], "already at the end of the function"
    return moving, None


class _Mover(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, lines: Collection[int]) -> None:
        super().__init__()
        self.lines = set(lines)
        self.found: set[int] = set()
        self.notes: list[str] = []
        self.skipped: list[Skipped] = []

    def _line(self, node: cst.CSTNode) -> int:
        return self.get_metadata(PositionProvider, node).start.line

    def _targets(self, body: Sequence[cst.BaseStatement]) -> list[int]:
        """The statements of this body on a targeted line that may move (the others are
        reported as skipped, or left to the nested function that holds them)."""
        out = []
        for k, st in enumerate(body):
            pos = self.get_metadata(PositionProvider, st)
            hit = sorted(ln for ln in self.lines if pos.start.line <= ln <= pos.end.line)
            if not hit or isinstance(st, (cst.FunctionDef, cst.ClassDef)):
                continue
            self.found.update(hit)
            if not isinstance(st, cst.SimpleStatementLine):
                kind = type(st).__name__.lower()
                self.skipped.append(Skipped(hit[0], f"not moved: inside a `{kind}` block"))
            elif not (_effects(st).logs or _uses_item(st)):
                self.skipped.append(
                    Skipped(hit[0], "not moved: not a print, logging call or .item() read")
                )
            else:
                out.append(k)
        return out

    def leave_FunctionDef(
        self, original: cst.FunctionDef, updated: cst.FunctionDef
    ) -> cst.FunctionDef:
        if not isinstance(updated.body, cst.IndentedBlock):
            return updated
        body = list(updated.body.body)
        orig = list(original.body.body) if isinstance(original.body, cst.IndentedBlock) else []
        for k in sorted(self._targets(orig), reverse=True):
            line = self._line(orig[k])
            moving, why = _plan_move(body, k)
            if why:
                self.skipped.append(Skipped(line, f"not moved: {why}"))
                continue
            kept = [st for n, st in enumerate(body) if n not in moving]
            ret = kept.pop()
            body = [*kept, *[body[n] for n in moving], ret]
            self.notes.append(
                f"line {line}: moved to the end of {original.name.value}(), before its return "
                "(the graph break now falls after the function's tensor work)"
            )
        return updated.with_changes(body=updated.body.with_changes(body=body))


def rewrite_graph_breaks(source: str, lines: Collection[int], name: str = "<source>") -> Rewrite:
    """Move the logging lines at ``lines`` (graph-break sites: a print, a logging call, a
    ``.item()`` read) to the end of their function, where safe (see the module's doc)."""
    wrapper = wrap(source, name)
    mover = _Mover(lines)
    new = wrapper.visit(mover)
    skipped = list(mover.skipped)
    for ln in sorted(set(lines) - mover.found):
        skipped.append(Skipped(ln, "not a statement of a function's own body"))
    notes = sorted(mover.notes)
    return Rewrite(new.code if notes else source, notes, sorted(skipped, key=lambda s: s.line))


def _uses_item(node: cst.CSTNode) -> bool:
    return bool(m.findall(node, m.Call(func=m.Attribute(attr=m.Name("item") | m.Name("tolist")))))


def plan(kind: FixKind, inp: PlanInput) -> PlannedFix:
    """Graph breaks at a print, a logging call or an .item() read: moved to the end of their
    compiled function (:func:`rewrite_graph_breaks`)."""
    found = findings_named(inp.profile, kind.findings)
    movable = [f for f in found if f.evidence.get("kind") in MOVABLE_KINDS and f.site]
    fix = PlannedFix(kind, False, bool(movable), "", findings=[f.id for f in found])
    fix.sites = sorted({f.site for f in movable if f.site})
    if not movable:
        fix.reason = "no graph break at a print, logging call or .item() with a site"
        return fix
    fix.reason = "graph breaks at logging lines: " + ", ".join(fix.sites)
    for path, lines in by_file(fix.sites).items():
        fix.edits.append(SourceEdit(path, lines, for_lines(rewrite_graph_breaks, lines)))
    return fix
