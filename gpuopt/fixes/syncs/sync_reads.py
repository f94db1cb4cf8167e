"""The reads of the ``syncs`` fix that are not sums: each followed to where its value is used
(:mod:`.read_flow`), then moved into the branch that uses it (:mod:`.deferred_reads`), kept as
a tensor in its list (:mod:`.kept_tensors`), or left alone with the use that needs it at once.

A read inside ``return`` of a function of the file (``def accuracy(...): return
(...).mean().item()``) is followed to the function's calls in loops: the call's statement is
what moves (``acc = accuracy(logits, y)`` into the logging branch).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m

from gpuopt.fixes.syncs.deferred_reads import Move, apply_moves, plan_move
from gpuopt.fixes.syncs.effects import Effects
from gpuopt.fixes.syncs.kept_tensors import Kept, plan_kept
from gpuopt.fixes.syncs.read_flow import READ, Flow, shorten, use_of
from gpuopt.source import Skipped, code, wrap


@dataclass
class ReadsPlan:
    replace: dict[cst.CSTNode, str] = field(default_factory=dict)
    # (statement line, branch line, the read alone when only it moves)
    moves: list[tuple[int, int, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.replace or self.moves)


class _Reads:
    """The module's read calls, by line."""

    def __init__(self, flow: Flow) -> None:
        self.calls = [c for c in m.findall(flow.module, READ) if isinstance(c, cst.Call)]
        self.flow = flow

    def on(self, line: int) -> list[cst.Call]:
        """The reads a site's line names: those on it, else those of the statement over it."""
        here = [c for c in self.calls if self.flow.line(c) == line]
        if here:
            return here
        return [c for c in self.calls if self.flow.spans(self.flow.statement(c) or c, line)]


def _implicit(flow: Flow, line: int) -> str:
    """The reason for a sync site without an explicit read: the statement that syncs."""
    stmts = [
        s
        for s in m.findall(flow.module, m.SimpleStatementLine())
        if isinstance(s, cst.SimpleStatementLine) and flow.spans(s, line)
    ]
    where = f" (`{shorten(code(stmts[-1]), 50)}`)" if stmts else ""
    return (
        f"no explicit read here{where}: the device is read implicitly (a tensor formatted or "
        "printed, a data-dependent shape), which gpuopt does not rewrite; reading it with "
        "`.item()` every N steps is the change to make by hand"
    )


def _torch_alias(module: cst.Module) -> str | None:
    """The name ``import torch`` (``as th``) binds, for the code the fix writes."""
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    if code(alias.name) == "torch":
                        bound = alias.asname.name if alias.asname else alias.name
                        return code(bound)
    return None


class _Planner:
    def __init__(self, flow: Flow, declared: set[str]) -> None:
        self.flow = flow
        self.effects = Effects.of(flow.module)
        self.declared = declared
        self.out = ReadsPlan()
        self.moved: dict[int, Move] = {}  # id(statement) -> its move
        self.kept: dict[int, Kept] = {}

    def line(self, line: int, reads: list[cst.Call]) -> None:
        if not reads:
            self.out.skipped.append(Skipped(line, _implicit(self.flow, line)))
            return
        problems: list[str] = []
        done: list[str] = []
        for read in reads:
            result = self.read(read)
            (done if result.startswith("+") else problems).append(result.lstrip("+"))
        if done:
            self.out.notes += [f"line {line}: {d}" for d in dict.fromkeys(done)]
        for p in dict.fromkeys(problems):
            self.out.skipped.append(Skipped(line, p))

    def read(self, read: cst.Call) -> str:
        """``+note`` when the read is moved or kept, else the reason it stays."""
        flow = self.flow
        small = flow.small(read)
        if isinstance(small, cst.Assign) and flow.within(read, small.value):
            stmt = flow.statement(small)
            if isinstance(stmt, cst.SimpleStatementLine):
                return self.move(stmt, "")
        if isinstance(small, cst.Return) and small.value is not None:
            return self.callers(read)
        if (
            isinstance(small, cst.Expr)
            and isinstance(small.value, cst.Call)
            and m.matches(small.value.func, m.Attribute(attr=m.Name("append")))
            and len(small.value.args) == 1
            and small.value.args[0].value is read
        ):
            return self.keep(small.value, read)
        return self.needed(read)

    def needed(self, node: cst.CSTNode, subject: str = "the value read here") -> str:
        use = use_of(self.flow, node)
        when = ""
        fn = self.flow.function(node)
        if fn is not None and self.flow.loop(node) is None:
            around = self.flow.loop(fn)
            if around is not None:  # a closure the step defines (an LBFGS closure)
                when = (
                    f"at every call of `{fn.name.value}()`, a function the loop at line "
                    f"{self.flow.line(around)} defines (an optimizer may call it several times "
                    "a step)"
                )
        return use.sentence(subject, self.branch(node) is None, when) + self.already(node)

    def branch(self, node: cst.CSTNode) -> cst.If | None:
        loop = self.flow.loop(node)
        return self.flow.branch(node, loop) if loop is not None else None

    def already(self, node: cst.CSTNode) -> str:
        """Where a read already runs only in a branch: that it does, and when it syncs."""
        branch = self.branch(node)
        if branch is None:
            return ""
        return (
            f"; it already runs only in the branch `if {shorten(code(branch.test), 40)}:` "
            f"(line {self.flow.line(branch)}), and syncs as often as that branch runs"
        )

    def move(self, stmt: cst.SimpleStatementLine, via: str) -> str:
        if id(stmt) in self.moved:
            mv = self.moved[id(stmt)]
            return f"+{via}`{mv.name}` is read in the branch at line {mv.branch_line}"
        found = plan_move(self.flow, self.effects, stmt, self.declared)
        if isinstance(found, str):
            return f"{via}{found}{self.already(stmt)}"
        self.moved[id(stmt)] = found
        self.out.moves.append((found.line, found.branch_line, found.read))
        if found.read:
            return (
                f"+{via}`{found.name}` is used only in the branch at line {found.branch_line}: "
                "it stays a tensor (detached), computed where it was (its value may have "
                f"effects or inputs that change), and is read there (`{found.name} = "
                f"{found.read}`)"
            )
        return (
            f"+{via}`{found.name}` is used only in the branch at line {found.branch_line}: its "
            "read moves there (the steps that skip the branch no longer wait for the device)"
        )

    def callers(self, read: cst.Call) -> str:
        fn = self.flow.function(read)
        if fn is None or self.flow.parents.get(fn) is not self.flow.module:
            return self.needed(read)
        name = fn.name.value
        calls = [
            c
            for c in m.findall(self.flow.module, m.Call(func=m.Name(name)))
            if isinstance(c, cst.Call) and self.flow.loop(c) is not None
        ]
        if not calls:
            return self.needed(read)
        results = []
        for call in calls:
            via = f"returned by `{name}` to line {self.flow.line(call)}: "
            small = self.flow.small(call)
            stmt = self.flow.statement(small) if small is not None else None
            if (
                isinstance(small, cst.Assign)
                and self.flow.within(call, small.value)
                and isinstance(stmt, cst.SimpleStatementLine)
            ):
                results.append(self.move(stmt, via))
            else:
                results.append(via + self.needed(call, "its value"))
        ok = [r for r in results if r.startswith("+")]
        return ok[0] if len(ok) == len(results) else next(r for r in results if r[0] != "+")

    def keep(self, append: cst.Call, read: cst.Call) -> str:
        found = plan_kept(
            self.flow, self.effects, append, read, self.declared, _torch_alias(self.flow.module)
        )
        if isinstance(found, str):
            return found
        if id(append) not in self.kept:
            self.kept[id(append)] = found
            self.out.replace.update(found.replace)
        return (
            f"+`{found.name}` keeps the tensors (`{code(read.func).rsplit('.', 1)[0]}` "
            "detached), read where the list is used"
        )


def plan_reads(
    wrapper: cst.MetadataWrapper, lines: Collection[int], declared: set[str]
) -> ReadsPlan:
    """What the ``syncs`` fix makes of the reads at ``lines`` (that are not sums)."""
    if not lines:
        return ReadsPlan()
    flow = Flow(wrapper)
    planner = _Planner(flow, declared)
    reads = _Reads(flow)
    for line in sorted(lines):
        planner.line(line, reads.on(line))
    return planner.out


def move_statements(source: str, moves: list[tuple[int, int, str]], name: str) -> str:
    """``source`` with each statement starting at the first line of a move taken to the top of
    the ``if`` starting at the second (lines of ``source``), or only its read (the third, when
    given)."""
    wrapper = wrap(source, name)
    flow = Flow(wrapper)
    stmts = {
        flow.line(s): s
        for s in m.findall(wrapper.module, m.SimpleStatementLine())
        if isinstance(s, cst.SimpleStatementLine)
    }
    ifs = {flow.line(s): s for s in m.findall(wrapper.module, m.If()) if isinstance(s, cst.If)}
    found = []
    for a, b, read in moves:
        if a in stmts and b in ifs:
            stmt = stmts[a]
            target = stmt.body[0].targets[0].target if read else None  # type: ignore[attr-defined]
            var = target.value if isinstance(target, cst.Name) else ""
            found.append(Move(stmt, ifs[b], var, a, b, read))
    return apply_moves(wrapper.module, found).code


__all__ = ["ReadsPlan", "move_statements", "plan_reads"]
