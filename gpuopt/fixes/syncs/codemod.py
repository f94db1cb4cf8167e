"""The ``syncs`` fix's source form: per-step reads of a device value, accumulated on the device.

A training loop that does ``running_loss += loss.item()`` every step makes the host wait for the
GPU every step, only to print the sum every N steps. The rewrite keeps the sum on the device and
reads it where the script uses it:

* **float sums** — ``acc += E`` where ``E`` holds one ``X.item()`` or ``float(X)`` within plain
  scalar arithmetic (``+ - * /`` with literals, names, ``len(...)``, ``.size(...)``,
  ``.numel()``, ``.shape[...]``), and every assignment of ``acc`` in its scope is a float
  literal: the read becomes ``X.detach().double()`` (float64 on the device: the same IEEE double
  arithmetic Python does, so the values are bit-identical) and every other read of ``acc`` in the
  scope becomes ``float(acc)``;
* **integer counts** — ``acc += (<comparison>).sum().item()`` (or ``.eq(...)``/``.ne``/... then
  ``.sum()``/``.count_nonzero()``) with integer-literal assignments: ``.item()`` is dropped (an
  int64 tensor counts exactly) and the reads become ``int(acc)``.

Left alone, with the reason: a value used at once every step (``print(loss.item())``,
``losses.append(...)``, ``if loss.item() > x``), an accumulator that is not a plain local name,
declared ``global``/``nonlocal``, read in a nested function, assigned anything but a literal of
its kind, read every step (outside an ``if`` in the same loop), or arithmetic outside the list.
Idempotent: a second run finds no ``.item()`` left to move.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m
from libcst.metadata import (
    Access,
    Assignment,
    ComprehensionScope,
    ParentNodeProvider,
    Scope,
    ScopeProvider,
)

from gpuopt.fixes.syncs.sync_reads import move_statements, plan_reads
from gpuopt.source import PositionProvider, Rewrite, Skipped, wrap

_ITEM = m.Call(func=m.Attribute(attr=m.Name("item")), args=[])
_FLOAT = m.Call(func=m.Name("float"), args=[m.Arg(keyword=None)])
_COMPARE_CALL = m.Call(
    func=m.Attribute(
        attr=m.Name("eq") | m.Name("ne") | m.Name("lt") | m.Name("le") | m.Name("gt") | m.Name("ge")
    )
)
_COUNT = m.Call(
    func=m.Attribute(
        value=m.Comparison() | _COMPARE_CALL,
        attr=m.Name("sum") | m.Name("count_nonzero"),
    ),
    args=[],
)
_SCALAR_CALL = m.Call(func=m.Name("len")) | m.Call(
    func=m.Attribute(attr=m.Name("size") | m.Name("numel") | m.Name("dim"))
)
_SCALAR_OPS = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide)
_WRAP = {"float": "float", "int": "int"}


@dataclass
class _Candidate:
    stmt: cst.AugAssign
    line: int
    acc: str
    kind: str  # "float" | "int"
    read: cst.Call  # the .item() / float(...) call to replace


@dataclass
class _Plan:
    replace: dict[cst.CSTNode, cst.BaseExpression] = field(default_factory=dict)
    wrap: dict[cst.Name, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def _reads(node: cst.CSTNode) -> list[cst.Call]:
    return [n for n in m.findall(node, _ITEM | _FLOAT) if isinstance(n, cst.Call)]


def _scalar(node: cst.BaseExpression, read: cst.Call) -> bool:
    """``node`` is plain scalar arithmetic around the one read."""
    if node is read:
        return True
    if isinstance(node, (cst.Integer, cst.Float, cst.Name)):
        return True
    if isinstance(node, cst.Attribute):
        return isinstance(node.value, (cst.Name, cst.Attribute))
    if m.matches(node, _SCALAR_CALL):
        return True
    if isinstance(node, cst.Subscript) and m.matches(node.value, m.Attribute(attr=m.Name("shape"))):
        return True
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, _SCALAR_OPS):
        return _scalar(node.left, read) and _scalar(node.right, read)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return _scalar(node.expression, read)
    return False


def _classify(stmt: cst.AugAssign) -> tuple[str, cst.Call] | str:
    """``(kind, read)`` for a rewritable accumulation, else the reason it is not."""
    reads = _reads(stmt.value)
    if len(reads) != 1:
        return "more than one read in one sum" if reads else "nothing read from the device here"
    read = reads[0]
    if m.matches(read, _ITEM) and isinstance(read.func, cst.Attribute):
        if m.matches(read.func.value, _COUNT) and stmt.value is read:
            return "int", read
    if _scalar(stmt.value, read):
        return "float", read
    return "the sum's arithmetic is more than scalar +, -, *, / (left as it is)"


class _Collect(cst.CSTVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, lines: Collection[int]) -> None:
        self.lines = set(lines)
        self.augs: list[tuple[cst.AugAssign, int]] = []
        self.declared: set[str] = set()

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        pos = self.get_metadata(PositionProvider, node)
        # a sum continued over lines (``total += \`` then ``loss.item()``): the site is the
        # line of the read, not the statement's first
        found = [ln for ln in sorted(self.lines) if pos.start.line <= ln <= pos.end.line]
        if found:
            self.augs.append((node, found[0]))

    def visit_Global(self, node: cst.Global) -> None:
        self.declared.update(n.name.value for n in node.names)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self.declared.update(n.name.value for n in node.names)


class _Apply(cst.CSTTransformer):
    def __init__(self, plan: _Plan, texts: Mapping[cst.CSTNode, str]) -> None:
        self.plan = plan
        self.texts = texts  # other expressions replaced by new text (kept tensors)

    def on_leave(  # type: ignore[override]
        self, original_node: cst.CSTNode, updated_node: cst.CSTNode
    ) -> cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel[cst.CSTNode]:
        text = self.texts.get(original_node)
        if text is not None and isinstance(original_node, cst.BaseExpression):
            new = cst.parse_expression(text)
            if original_node.lpar:
                return new.with_changes(lpar=original_node.lpar, rpar=original_node.rpar)
            return new
        return super().on_leave(original_node, updated_node)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        return self.plan.replace.get(original, updated)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        fn = self.plan.wrap.get(original)
        if fn is None:
            return updated
        return cst.Call(func=cst.Name(fn), args=[cst.Arg(value=updated)])


def _device_value(read: cst.Call, kind: str) -> cst.BaseExpression:
    if kind == "int":
        assert isinstance(read.func, cst.Attribute)
        return read.func.value
    if m.matches(read, _ITEM) and isinstance(read.func, cst.Attribute):
        inner = read.func.value
    else:
        inner = read.args[0].value
    detached = cst.Call(func=cst.Attribute(value=inner, attr=cst.Name("detach")))
    out = cst.Call(func=cst.Attribute(value=detached, attr=cst.Name("double")))
    return out.with_changes(lpar=read.lpar, rpar=read.rpar)


class _Analysis:
    """Scope facts for one module: who assigns and reads each accumulator."""

    def __init__(self, wrapper: cst.MetadataWrapper) -> None:
        self.scopes = wrapper.resolve(ScopeProvider)
        self.parents = wrapper.resolve(ParentNodeProvider)
        self.positions = wrapper.resolve(PositionProvider)

    def line(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line

    def scope_of(self, stmt: cst.AugAssign) -> Scope | None:
        return self.scopes.get(stmt.target)

    def loop_of(self, node: cst.CSTNode) -> cst.CSTNode | None:
        p = self.parents.get(node)
        while p is not None and not isinstance(p, (cst.For, cst.While, cst.FunctionDef)):
            p = self.parents.get(p)
        return p if isinstance(p, (cst.For, cst.While)) else None

    def under_if_within(self, node: cst.CSTNode, loop: cst.CSTNode) -> bool:
        p = self.parents.get(node)
        while p is not None and p is not loop:
            if isinstance(p, cst.If):
                return True
            p = self.parents.get(p)
        return False

    def divided(self, name: cst.Name) -> bool:
        """``name`` is an operand of a true division (``x / n`` or ``n / x``)."""
        p = self.parents.get(name)
        return isinstance(p, cst.BinaryOperation) and isinstance(p.operator, cst.Divide)

    def wrapped_already(self, name: cst.Name) -> bool:
        arg = self.parents.get(name)
        call = self.parents.get(arg) if isinstance(arg, cst.Arg) else None
        return isinstance(call, cst.Call) and m.matches(call.func, m.Name("float") | m.Name("int"))


def _literal_kind(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        node = node.expression
    if isinstance(node, cst.Float):
        return "float"
    if isinstance(node, cst.Integer):
        return "int"
    return None


def _check_assignments(
    a: _Analysis, scope: Scope, c: _Candidate, targeted: set[cst.AugAssign]
) -> str | None | int:
    """None when every assignment is a literal of the sum's kind; the line of an integer
    literal starting a float sum (``train_loss = 0``: safe only if every read divides); else
    the reason to leave the sum alone."""
    int_start: int | None = None
    for assignment in scope.assignments[c.acc]:
        if not isinstance(assignment, Assignment):
            return f"{c.acc} is bound by an import or a builtin"
        node = assignment.node
        parent = a.parents.get(node)
        if isinstance(parent, cst.AugAssign) and parent in targeted:
            continue
        if isinstance(parent, cst.AssignTarget):
            assign = a.parents.get(parent)
            kind = _literal_kind(assign.value) if isinstance(assign, cst.Assign) else None
            if kind == c.kind:
                continue
            if kind == "int" and c.kind == "float":
                int_start = a.line(node)
                continue
            return (
                f"{c.acc} is assigned something else than a {c.kind} literal at line {a.line(node)}"
            )
        return f"{c.acc} is also assigned at line {a.line(node)}"
    return int_start


def _accesses(scope: Scope, acc: str) -> list[Access]:
    """Every read of ``acc`` as bound in ``scope``: its own, and those of nested scopes (which
    libcst files under the nested scope; they reference the same assignments)."""
    seen: dict[int, Access] = {}
    for access in scope.accesses[acc]:
        seen[id(access)] = access
    for assignment in scope.assignments[acc]:
        for access in assignment.references:
            seen[id(access)] = access
    return list(seen.values())


def _reads_to_wrap(a: _Analysis, scope: Scope, c: _Candidate) -> list[cst.Name] | str:
    loop = a.loop_of(c.stmt)
    out: list[cst.Name] = []
    for access in _accesses(scope, c.acc):
        name = access.node
        if not isinstance(name, cst.Name):
            return f"{c.acc} is used in a way gpuopt does not follow (line {a.line(name)})"
        if isinstance(a.parents.get(name), cst.AugAssign):
            continue  # an accumulation's own target
        if access.scope is not scope and not isinstance(access.scope, ComprehensionScope):
            return f"{c.acc} is read in a nested function or class (line {a.line(name)})"
        if loop is not None and a.loop_of(name) is loop and not a.under_if_within(name, loop):
            return f"{c.acc} is read every step (line {a.line(name)}): the sync would stay"
        if not a.wrapped_already(name):
            out.append(name)
    return out


def _plan_one(
    a: _Analysis, c: _Candidate, targeted: set[cst.AugAssign], declared: set[str], plan: _Plan
) -> str | None:
    if c.acc in declared:
        return f"{c.acc} is declared global or nonlocal"
    scope = a.scope_of(c.stmt)
    if scope is None:
        return f"no scope found for {c.acc}"
    problem = _check_assignments(a, scope, c, targeted)
    if isinstance(problem, str):
        return problem
    names = _reads_to_wrap(a, scope, c)
    if isinstance(names, str):
        return names
    if problem is not None and not all(a.divided(n) for n in names):
        # 0 + 0.5 is a float in Python as on the device; but with no step run, the int 0 printed
        # as is ("0") would become "0.0": only a true division reads both the same
        return (
            f"{c.acc} starts as an int (line {problem}) and is read outside a division: "
            "printed before any step it would show 0.0 instead of 0"
        )
    plan.replace[c.read] = _device_value(c.read, c.kind)
    for n in names:
        plan.wrap[n] = _WRAP[c.kind]
    where = ", ".join(str(ln) for ln in sorted({a.line(n) for n in names})) or "none"
    plan.notes.append(
        f"line {c.line}: {c.acc} accumulates on the device (read as {c.kind}() at lines {where})"
    )
    return None


def _candidates(collect: _Collect, plan: _Plan) -> list[_Candidate]:
    out = []
    for stmt, line in collect.augs:
        if not isinstance(stmt.operator, cst.AddAssign) or not isinstance(stmt.target, cst.Name):
            plan.skipped.append(Skipped(line, "not a `name += ...` sum"))
            continue
        kind = _classify(stmt)
        if isinstance(kind, str):
            if kind != "nothing read from the device here":
                plan.skipped.append(Skipped(line, kind))
            continue
        out.append(_Candidate(stmt, line, stmt.target.value, kind[0], kind[1]))
    return out


def rewrite_syncs(source: str, lines: Collection[int], name: str = "<source>") -> Rewrite:
    """The ``syncs`` fix on the reads at ``lines`` (the finding's sites): sums accumulated on
    the device, reads used only in a later branch moved into it, lists of read values keeping
    the tensors; every other read left alone with how its value is used."""
    wrapper = wrap(source, name)
    collect = _Collect(lines)
    wrapper.visit(collect)
    plan = _Plan()
    cands = _candidates(collect, plan)
    analysis = _Analysis(wrapper)
    # one group per variable: the same name in two functions is two variables
    by_acc: dict[tuple[int, str], list[_Candidate]] = {}
    for c in cands:
        by_acc.setdefault((id(analysis.scope_of(c.stmt)), c.acc), []).append(c)
    for group in by_acc.values():
        targeted = {c.stmt for c in group}
        kinds = {c.kind for c in group}
        trial = _Plan()
        problem = None if len(kinds) == 1 else "its sums mix integer counts and float values"
        for c in group:
            problem = problem or _plan_one(analysis, c, targeted, collect.declared, trial)
        if problem is not None:
            plan.skipped += [Skipped(c.line, problem) for c in group]
            continue
        plan.replace.update(trial.replace)
        plan.wrap.update(trial.wrap)
        plan.notes += trial.notes
    handled = {c.line for c in cands} | {s.line for s in plan.skipped}
    reads = plan_reads(wrapper, sorted(set(lines) - handled), collect.declared)
    plan.skipped += reads.skipped
    plan.notes += reads.notes
    if not plan.replace and not reads.changed:
        return Rewrite(source, [], sorted(plan.skipped, key=lambda s: s.line))
    new = wrapper.module.visit(_Apply(plan, reads.replace)).code
    if reads.moves:
        new = move_statements(new, reads.moves, name)
    return Rewrite(new, plan.notes, sorted(plan.skipped, key=lambda s: s.line))
