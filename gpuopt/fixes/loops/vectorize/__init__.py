"""The ``vectorize`` fix's source form: Python loops of tiny indexing ops rewritten as vectorized
torch code (docs/vectorize.md has every pattern with a before/after example).

For each targeted line, the ``for`` loop starting there (or the ``torch.stack``/``torch.cat``
over a comprehension there) is described by the safety analysis
(:mod:`~gpuopt.source.loop_facts`: known bounds, no data-dependent exit,
no side effects, no loop-carried dependence) and offered to the patterns in turn; the first that
matches replaces it, else the line is left alone with the reason:

========================  ==================================================================
``class-masks``           ``m[:, c] = seg == c`` → one broadcast comparison against arange
``scatter-add``           ``h[idx[i]] += v[i]`` → one ``index_put_(..., accumulate=True)``
``row-updates``           ``out[i] = f(x[i])`` → ``out[:n] = f(x[:n])``
``gathers``               ``out[i] = x[idx[i]]`` → ``out[:n] = x[idx[:n]]``
``sums`` / ``maxima``     ``acc = acc + x[i]`` → ``acc = acc + x[:n].sum(0)`` (``amax``)
``stacks`` / ``vmap``     ``torch.stack([f(x[i]) ...])``, ``outs.append(...)`` → one batched op,
                          ``torch.vmap(f)`` when ``f`` is a pure tensor function
``numpy-gathers``         ``torch.stack([torch.from_numpy(a[i:i+k]...) for i in ix])`` → one
                          fancy index ``a[np.asarray(ix)[:, None] + np.arange(k)]``
========================  ==================================================================

Each pattern is a small module of libcst matchers and a builder; this module's transformer puts
the result in place of the loop, keeping every other byte, the comments above the loop and the
comments in its body (moved above the new statement; the header's trailing comment stays at the
end of the new line). Every rewrite also comes out as a :class:`LoopChange`: the old and new
code as snippets that run on their own, the names they read and write and the preconditions,
for the check on inputs recorded from the real run (:mod:`gpuopt.fixes.loops.check`).
Idempotent: the rewritten code has no loop left on the line.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m

from gpuopt.fixes.loops.vectorize import (
    class_masks,
    numpy_gathers,
    reductions,
    row_updates,
    scatter_add,
    stacks,
)
from gpuopt.fixes.loops.vectorize.match import Match
from gpuopt.source import Rewrite, Skipped, code, wrap
from gpuopt.source.loop_facts import (
    LoopShape,
    ModuleFacts,
    Refusal,
    describe_loop,
    root_names,
)

PATTERNS = (class_masks, scatter_add, row_updates, reductions, stacks)
PATTERN_NAMES = (
    "class-masks",
    "scatter-add",
    "row-updates",
    "gathers",
    "sums",
    "maxima",
    "stacks",
    "vmap",
    "numpy-gathers",
)
NOT_A_PATTERN = (
    "the loop's body is none of the patterns gpuopt vectorizes (per-class masks, row updates, "
    "gathers, scatter-adds, sums, maxima, appends: docs/vectorize.md)"
)


@dataclass
class LoopChange:
    """One loop rewritten, as the check runs it: ``old`` and ``new`` are snippets that run on
    their own in a namespace holding ``reads``; after both, ``writes`` must be equal."""

    line: int  # the targeted line (the finding's)
    capture_line: int  # the line whose first execution the check captures the inputs at
    pattern: str
    what: str
    old: str
    new: str
    reads: list[str]
    writes: list[str]
    preconditions: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)  # padding: whose gradients are compared


@dataclass
class LoopRewrite(Rewrite):
    changes: list[LoopChange] = field(default_factory=list)


def _match_loop(loop: cst.For, facts: ModuleFacts) -> tuple[Match, LoopShape] | Refusal:
    shape = describe_loop(loop, facts)
    if isinstance(shape, Refusal):
        return shape
    refusal: Refusal | None = None
    for pattern in PATTERNS:
        found = pattern.match(shape, facts)
        if isinstance(found, Match):
            return found, shape
        refusal = refusal or found
    if refusal is None and shape.calls:
        return Refusal(f"calls `{shape.calls[0]}(...)`, which gpuopt cannot prove pure")
    return refusal or Refusal(NOT_A_PATTERN)


class _Targets(cst.CSTVisitor):
    """The loops, while-loops and stack/cat comprehensions on the targeted lines."""

    def __init__(self, facts: ModuleFacts, lines: set[int]) -> None:
        self.facts = facts
        self.lines = lines
        self.loops: dict[int, cst.For] = {}
        self.whiles: set[int] = set()
        self.comprehensions: dict[int, cst.Call] = {}

    def visit_For(self, node: cst.For) -> None:
        line = self.facts.line(node)
        if line in self.lines:
            self.loops.setdefault(line, node)

    def visit_While(self, node: cst.While) -> None:
        self.whiles.add(self.facts.line(node))

    def visit_Call(self, node: cst.Call) -> None:
        if node.args and isinstance(node.args[0].value, cst.ListComp):
            for line in (self.facts.line(node), self.facts.line(node.args[0].value)):
                if line in self.lines:
                    self.comprehensions.setdefault(line, node)


def loop_comments(loop: cst.For) -> tuple[list[cst.EmptyLine], cst.TrailingWhitespace | None]:
    """The comments of the loop: own-line ones (above it, in its body) and the one trailing its
    header (or, when the header has none, its one body line's)."""
    above = list(loop.leading_lines)
    block = loop.body
    body = block.body if isinstance(block, cst.IndentedBlock) else []
    trailing = block.header if isinstance(block, cst.IndentedBlock) else None
    trailing = trailing if trailing is not None and trailing.comment else None
    for stmt in body:
        above += [ln for ln in getattr(stmt, "leading_lines", ()) if ln.comment]
        tail = getattr(stmt, "trailing_whitespace", None)
        if isinstance(tail, cst.TrailingWhitespace) and tail.comment:
            if trailing is None and len(body) == 1:
                trailing = tail
            else:
                above.append(cst.EmptyLine(comment=tail.comment))
    if isinstance(loop.body, cst.IndentedBlock):
        above += [ln for ln in loop.body.footer if ln.comment]
    return above, trailing


def _guarded(match: Match, shape: LoopShape) -> list[str]:
    """The statements, under ``if <the loop runs>:`` when an empty loop would differ."""
    b = shape.bounds
    need = (match.guard and not (b is not None and b.at_least_one)) or (b is not None and b.guard)
    if not need:
        return match.statements
    body = "\n".join("    " + s.replace("\n", "\n    ") for s in match.statements)
    return [f"if {shape.count()}:\n{body}"]


def _statements(
    match: Match, loop: cst.For, facts: ModuleFacts, shape: LoopShape
) -> list[cst.BaseStatement]:
    indent = facts.module.default_indent
    config = facts.module.config_for_parsing
    out = [
        cst.parse_statement(text.replace("\n    ", "\n" + indent) + "\n", config=config)
        for text in _guarded(match, shape)
    ]
    above, trailing = loop_comments(loop)
    first = out[0].with_changes(leading_lines=above)
    if trailing is not None:
        if isinstance(first, cst.SimpleStatementLine):
            first = first.with_changes(trailing_whitespace=trailing)
        elif isinstance(first, cst.If):
            first = first.with_changes(body=first.body.with_changes(header=trailing))
    return [first, *out[1:]]


class LoopsReplaced(cst.CSTTransformer):
    """Each loop of ``loops`` replaced by its statements; each call of ``exprs`` by its text."""

    def __init__(
        self,
        loops: dict[cst.For, list[cst.BaseStatement]],
        exprs: dict[cst.Call, str] | None = None,
    ) -> None:
        self.loops = loops
        self.exprs = exprs or {}

    def leave_For(
        self, original: cst.For, updated: cst.For
    ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        new = self.loops.get(original)
        return cst.FlattenSentinel(new) if new is not None else updated

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        text = self.exprs.get(original)
        if text is None:
            return updated
        return cst.parse_expression(text).with_changes(lpar=updated.lpar, rpar=updated.rpar)


def _statement_line(node: cst.CSTNode, facts: ModuleFacts) -> int:
    for a in facts.ancestors(node):
        if isinstance(a, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return facts.line(a)
    return facts.line(node)


def relocate(source: str, lines: Collection[int], anchors: Mapping[int, str]) -> dict[int, int]:
    """Old line → line in ``source``: a line whose text no longer starts with its anchor (the
    loop's header, as the finding quoted it) moved when another fix changed the file; the
    nearest line with that text is taken."""
    text = source.splitlines()
    out: dict[int, int] = {}
    for line in lines:
        anchor = anchors.get(line, "").strip()
        here = text[line - 1].strip() if 0 < line <= len(text) else ""
        if not anchor or here.startswith(anchor):
            out[line] = line
            continue
        same = [i for i, t in enumerate(text, 1) if t.strip().startswith(anchor)]
        out[line] = min(same, key=lambda i: abs(i - line)) if same else line
    return out


def rewrite_vectorize(
    source: str,
    lines: Collection[int],
    name: str = "<source>",
    anchors: Mapping[int, str] | None = None,
    cuda: bool = False,
) -> LoopRewrite:
    """Vectorize the loops starting on ``lines`` (old line numbers; ``anchors``: each line's
    header text, to find a loop another fix moved; ``cuda``: the script runs on a CUDA device,
    where some patterns have a faster form)."""
    wrapper = wrap(source, name)
    facts = ModuleFacts(wrapper, cuda=cuda)
    where = relocate(source, lines, anchors or {})
    targets = _Targets(facts, set(where.values()))
    wrapper.module.visit(targets)
    out = LoopRewrite(source)
    loops: dict[cst.For, list[cst.BaseStatement]] = {}
    exprs: dict[cst.Call, str] = {}
    for line in sorted(where):
        at = where[line]
        loop, comp = targets.loops.get(at), targets.comprehensions.get(at)
        if loop is not None:
            matched = _match_loop(loop, facts)
            found = matched if isinstance(matched, Refusal) else matched[0]
            if not isinstance(matched, Refusal):
                loops[loop] = _statements(matched[0], loop, facts, matched[1])
                out.changes.append(_loop_change(line, loop, matched[0], loops[loop], facts))
        elif comp is not None:
            found = (
                numpy_gathers.match_comprehension(comp, facts)
                or stacks.match_comprehension(comp, facts)
                or Refusal(NOT_A_PATTERN)
            )
            if isinstance(found, Match):
                exprs[comp] = found.statements[0]
                out.changes.append(_comp_change(line, comp, found, facts))
        else:
            found = Refusal(
                "a `while` loop: its trip count is data-dependent"
                if at in targets.whiles
                else "no `for` loop or torch.stack/torch.cat over a comprehension starts here"
            )
        if isinstance(found, Refusal):
            out.skipped.append(Skipped(line, str(found)))
        else:
            out.notes.append(f"line {line}: {found.pattern}: {found.what}")
    if loops or exprs:
        out.source = wrapper.module.visit(LoopsReplaced(loops, exprs)).code
    return out


_CONSTANTS = frozenset({"None", "True", "False"})


def _names(*nodes: cst.CSTNode) -> list[str]:
    found: set[str] = set()
    for node in nodes:
        found |= root_names(node)
    return sorted(found)


def _loop_change(
    line: int, loop: cst.For, match: Match, new: list[cst.BaseStatement], facts: ModuleFacts
) -> LoopChange:
    bare: list[cst.CSTNode] = [s.with_changes(leading_lines=[]) for s in new]
    new_text = "".join(code(s) for s in bare)
    var = loop.target.value if isinstance(loop.target, cst.Name) else ""
    reads = [n for n in _names(loop, *bare) if n != var and n not in _CONSTANTS]
    return LoopChange(
        line=line,
        capture_line=facts.line(loop),
        pattern=match.pattern,
        what=match.what,
        old=code(loop.with_changes(leading_lines=[])),
        new=new_text,
        reads=reads,
        writes=list(match.writes),
        preconditions=list(match.preconditions),
    )


def _comp_change(line: int, call: cst.Call, match: Match, facts: ModuleFacts) -> LoopChange:
    new = cst.parse_expression(match.statements[0])
    comp = call.args[0].value
    assert isinstance(comp, cst.ListComp)
    bound = {comp.for_in.target.value} if isinstance(comp.for_in.target, cst.Name) else set()
    return LoopChange(
        line=line,
        capture_line=_statement_line(call, facts),
        pattern=match.pattern,
        what=match.what,
        old=f"{stacks.RESULT} = {code(call)}\n",
        new=f"{stacks.RESULT} = {match.statements[0]}\n",
        reads=[n for n in _names(call, new) if n not in bound and n not in _CONSTANTS],
        writes=[stacks.RESULT],
        preconditions=list(match.preconditions),
    )


def find_loops(source: str) -> list[int]:
    """The lines of every ``for`` loop and stack/cat comprehension in ``source``."""
    wrapper = wrap(source)
    facts = ModuleFacts(wrapper)
    found = [facts.line(n) for n in m.findall(wrapper.module, m.For())]
    return sorted(set(found))


__all__ = [
    "PATTERN_NAMES",
    "LoopChange",
    "LoopRewrite",
    "LoopsReplaced",
    "find_loops",
    "loop_comments",
    "relocate",
    "rewrite_vectorize",
]
