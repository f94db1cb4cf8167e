"""A read used only inside a later branch of the step moves into that branch.

    acc = accuracy(logits, y)                   opt.zero_grad()
    top = logits[0].topk(3).indices.tolist()    loss.backward()
    opt.zero_grad()                       →     opt.step()
    loss.backward()                             if step % 20 == 0:
    opt.step()                                      acc = accuracy(logits, y)
    if step % 20 == 0:                              top = logits[0].topk(3).indices.tolist()
        print(f"{acc:.3f} {top}")                   print(f"{acc:.3f} {top}")

19 steps of 20 no longer wait for the device; the branch computes the same values from the same
tensors, so what it prints is the same, byte for byte. The statement ``NAME = EXPR`` moves
(to the top of the branch, its comments with it) only when the analysis proves that:

* ``NAME`` is bound only there, and every read of it is in the body of one ``if`` that follows
  it in the same block (not its test, not an ``else``, not after the loop, not in a nested
  function);
* ``EXPR`` has no side effect but the read (:class:`~gpuopt.fixes.syncs.effects.Effects`:
  no module call, no random draw, no print; a function of the file only if its body is pure);
* (or, when ``EXPR`` is ``D.item()`` — ``float(D)``, ``D.tolist()``... — with ``D`` a call that
  may have effects, such as ``criterion(out, y)``: ``D`` stays where it was, as
  ``NAME = D.detach()``, and only the read moves: ``NAME = NAME.item()`` first in the branch;
  nothing between may rebind or change ``NAME``)
* nothing ``EXPR`` reads changes before the branch: no statement in between rebinds such a
  name, changes it in place (``x.add_()``, ``x[i] = ...``, ``x += ...``), or passes it to a
  call that may change it; a name bound outside the loop (``model``, a tensor made before it)
  must not meet any call with effects in between (``opt.step()`` changes the parameters), and a
  name bound in the loop must hold a value computed there (a call's result, not an alias of
  outside state such as ``w = model.weight``); the branch's test has no effect either.

An error the moved expression raises is then raised inside the branch, in the steps that log.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from gpuopt.fixes.syncs.effects import Effects, dotted
from gpuopt.fixes.syncs.read_flow import BLOCK, READ, Flow, read_value, shorten, use_of
from gpuopt.source import code
from gpuopt.source.loop_facts import root_names

# methods that leave their receiver's value as it was (backward fills other tensors' .grad)
_KEEPS_VALUE = frozenset("backward retain_grad register_hook detach clone".split())


@dataclass
class Move:
    """One statement moved to the top of a branch."""

    stmt: cst.SimpleStatementLine
    into: cst.If
    name: str
    line: int
    branch_line: int
    # a split: the statement stays without its read (``NAME = D``, a tensor) and only the read
    # moves (``NAME = NAME.item()``): this text; empty when the whole statement moves
    read: str = ""


def _root(node: cst.BaseExpression) -> str | None:
    while isinstance(node, (cst.Subscript, cst.Attribute)):
        node = node.value
    return node.value if isinstance(node, cst.Name) else None


def _changed_names(stmt: cst.CSTNode, flow: Flow, effects: Effects) -> dict[str, str]:
    """Names a statement (and everything nested in it) rebinds or may change in place →
    what does it."""
    out: dict[str, str] = {}
    for node in m.findall(stmt, m.AssignTarget() | m.AugAssign() | m.AnnAssign()):
        target = node.target  # type: ignore[attr-defined]
        for t in m.findall(target, m.Name()) if isinstance(target, cst.Tuple) else [target]:
            assert isinstance(t, cst.BaseExpression)
            root = _root(t)
            if root:
                out.setdefault(root, f"`{shorten(code(node), 40)}`")
    for node in m.findall(stmt, m.For() | m.CompFor() | m.Del() | m.AsName()):
        target = node.name if isinstance(node, cst.AsName) else node.target  # type: ignore[attr-defined]
        for t in m.findall(target, m.Name()):
            assert isinstance(t, cst.Name)
            out.setdefault(t.value, f"`{shorten(code(node), 40)}`")
    for call in m.findall(stmt, m.Call()):
        assert isinstance(call, cst.Call)
        if isinstance(call.func, cst.Attribute):
            name = call.func.attr.value
            root = _root(call.func.value)
            if root and name not in _KEEPS_VALUE and effects.method(name, None, "", True):
                out.setdefault(root, f"`{shorten(code(call), 40)}`")
        if effects.of_call(call, {}, reads_ok=True):
            for arg in call.args:
                root = _root(arg.value)
                if root:
                    out.setdefault(root, f"`{shorten(code(call), 40)}`, which may change it")
    return out


def _effectful_call(stmt: cst.CSTNode, effects: Effects) -> str | None:
    """The first call of ``stmt`` that may have effects (its text), or None."""
    for call in m.findall(stmt, m.Call()):
        assert isinstance(call, cst.Call)
        if effects.of_call(call, {}, reads_ok=True):
            return shorten(code(call), 40)
    return None


class _Origins:
    """Whether a name holds a value computed in the current iteration of ``loop``."""

    def __init__(self, flow: Flow, effects: Effects, loop: cst.CSTNode, scope: object) -> None:
        self.flow, self.effects, self.loop, self.scope = flow, effects, loop, scope

    def fresh(self, name: str, depth: int = 0) -> bool:
        scope = self.scope
        if depth > 3 or not hasattr(scope, "assignments") or name not in scope:  # type: ignore[operator]
            return False
        nodes = self.flow.assignments(scope, name)  # type: ignore[arg-type]
        if not nodes:
            return False
        for node in nodes:
            if not self.flow.within(node, self.loop):
                return False
            if isinstance(self.loop, cst.For) and self.flow.within(node, self.loop.target):
                continue
            parent = self.flow.parents.get(node)
            assign = self.flow.parents.get(parent) if isinstance(parent, cst.AssignTarget) else None
            value: cst.BaseExpression | None = (
                assign.value if isinstance(assign, cst.Assign) else None
            )
            if isinstance(parent, cst.Element):  # a, b = ...: the element's own value
                value = self._element_value(parent)
            if value is None or not self._computed(value, depth):
                return False
        return True

    def _element_value(self, element: cst.Element) -> cst.BaseExpression | None:
        """The value bound to a target tuple's element: the same element of a tuple written
        out (``x, y = xs[i], ys[i]``), else the whole value (``logits, loss = model(X, Y)``)."""
        target = self.flow.parents.get(element)
        holder = [a for a in self.flow.ancestors(element) if isinstance(a, cst.Assign)]
        if not isinstance(target, (cst.Tuple, cst.List)) or not holder:
            return None
        value = holder[0].value
        if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(target.elements):
            index = next(i for i, e in enumerate(target.elements) if e is element)
            return value.elements[index].value
        return value

    def _computed(self, value: cst.BaseExpression, depth: int) -> bool:
        if isinstance(value, (cst.Subscript, cst.Attribute)):
            root = _root(value)
            return root is not None and self.fresh(root, depth + 1)
        if isinstance(value, cst.Name):
            return self.fresh(value.value, depth + 1)
        return True  # a call's or an operation's result: a value of its own


def plan_move(
    flow: Flow, effects: Effects, stmt: cst.SimpleStatementLine, declared: set[str]
) -> Move | str:
    """The move of ``stmt`` (``NAME = EXPR``) into the branch that reads ``NAME``, or why not."""
    if len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
        return "the read shares its line with other statements"
    assign = stmt.body[0]
    if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
        return f"`{shorten(code(assign.targets[0].target))}`: one name is followed, not several"
    name = assign.targets[0].target.value
    scope = flow.scope(assign.targets[0].target)
    loop = flow.loop(stmt)
    if scope is None or loop is None:
        return f"`{name}` is not assigned inside a loop"
    if name in declared:
        return f"`{name}` is declared global or nonlocal"
    others = [n for n in flow.assignments(scope, name) if n is not assign.targets[0].target]
    if others:
        where = flow.line(others[0]) if others[0] in flow.positions else "elsewhere"
        return f"`{name}` is also assigned at line {where}"
    branch = _the_branch(flow, stmt, name, scope, loop)
    if isinstance(branch, str):
        return branch
    test_effect = _effectful_call(branch.test, effects)
    if test_effect:
        return (
            f"the branch's test calls `{test_effect}`, which may have effects: it would run first"
        )
    between = _between(flow, stmt, branch)
    problem = effects.of_expr(assign.value, reads_ok=True)
    if problem:
        problem = f"`{name}`'s value {problem}: moved, that would run in fewer steps"
    else:
        problem = _inputs_kept(flow, effects, assign.value, between, loop, scope)
    if problem is None:
        return Move(stmt, branch, name, flow.line(stmt), flow.line(branch))
    read = _split(flow, effects, assign, name, between)
    if read is None:
        return problem
    return Move(stmt, branch, name, flow.line(stmt), flow.line(branch), read)


def _split(
    flow: Flow,
    effects: Effects,
    assign: cst.Assign,
    name: str,
    between: list[cst.BaseStatement],
) -> str | None:
    """``NAME = D.item()`` (or ``float(D)``, ``D.tolist()``...) with ``D`` a call's result: ``D``
    may stay where it is (it runs as before, in every step) and only its read move; the read
    as it will be written in the branch, or None."""
    value = assign.value
    if not m.matches(value, READ):
        return None
    assert isinstance(value, cst.Call)
    tensor = read_value(value)
    if not isinstance(tensor, cst.Call) or m.matches(tensor, READ):
        return None
    for s in between:
        if name in _changed_names(s, flow, effects):
            return None
    if isinstance(value.func, cst.Attribute):
        return f"{name}.{value.func.attr.value}()"
    return f"{code(value.func)}({name})"


def _the_branch(
    flow: Flow, stmt: cst.SimpleStatementLine, name: str, scope: object, loop: cst.CSTNode
) -> cst.If | str:
    """The one ``if`` after ``stmt`` in its block whose body holds every read of ``name``."""
    container, body = flow.block(stmt)
    index = next(i for i, s in enumerate(body) if s is stmt)
    accesses = flow.accesses(scope, name)  # type: ignore[arg-type]
    if not accesses:
        return f"`{name}` is never read: the line could go"
    found: cst.If | None = None
    for access in accesses:
        node = access.node
        line = flow.line(node)
        if access.scope is not scope:
            return f"`{name}` is read in a nested function or class (line {line})"
        if not flow.within(node, loop):
            return f"`{name}` is read after the loop (line {line}): the last step's value is needed"
        top = _top_statement(flow, node, container)
        branch = top if isinstance(top, cst.If) else None
        if (
            branch is None
            or next((i for i, s in enumerate(body) if s is top), -1) <= index
            or not flow.within(node, branch.body)
        ):
            # in a branch already, the read runs when the branch does, not every step
            every = flow.branch(stmt, loop) is None
            return use_of(flow, node).sentence(f"`{name}`", every_step=every)
        if found is not None and found is not branch:
            return (
                f"`{name}` is read in two branches (lines {flow.line(found)}, {flow.line(branch)})"
            )
        found = branch
    assert found is not None
    return found


def _top_statement(
    flow: Flow, node: cst.CSTNode, container: cst.CSTNode
) -> cst.BaseStatement | None:
    """The statement of ``container``'s block that holds ``node``."""
    child: cst.CSTNode = node
    for a in flow.ancestors(node):
        if a is container:
            return child if isinstance(child, cst.BaseStatement) else None
        child = a
    return None


def _between(flow: Flow, stmt: cst.BaseStatement, branch: cst.If) -> list[cst.BaseStatement]:
    _, body = flow.block(stmt)
    start = next(i for i, s in enumerate(body) if s is stmt)
    end = next(i for i, s in enumerate(body) if s is branch)
    return body[start + 1 : end]


def _inputs_kept(
    flow: Flow,
    effects: Effects,
    value: cst.BaseExpression,
    between: list[cst.BaseStatement],
    loop: cst.CSTNode,
    scope: object,
) -> str | None:
    """Why something ``value`` reads may change before the branch (None: nothing)."""
    origins = _Origins(flow, effects, loop, scope)
    changed: dict[str, tuple[str, int]] = {}
    effectful: tuple[str, int] | None = None
    for s in between:
        for n, what in _changed_names(s, flow, effects).items():
            changed.setdefault(n, (what, flow.line(s)))
        call = _effectful_call(s, effects)
        if call and effectful is None:
            effectful = (call, flow.line(s))
    for n in sorted(root_names(value)):
        if n in effects.aliases or n in effects.functions or _builtin(n):
            continue
        if n in changed:
            what, line = changed[n]
            return f"`{n}` changes before the branch: {what} at line {line}"
        if not origins.fresh(n) and effectful is not None:
            call, line = effectful
            return (
                f"it reads `{n}`, bound outside the step, and `{call}` (line {line}) runs before "
                "the branch: it may change it"
            )
    return None


def _builtin(name: str) -> bool:
    import builtins

    return hasattr(builtins, name)


def apply_moves(module: cst.Module, moves: list[Move]) -> cst.Module:
    """``module`` with each move's statement taken out of its block and put first in its
    branch (several into one branch keep their order)."""
    return module.visit(_Mover(moves))


class _Mover(cst.CSTTransformer):
    def __init__(self, moves: list[Move]) -> None:
        self.gone = {id(mv.stmt) for mv in moves if not mv.read}
        self.kept: dict[int, cst.SimpleStatementLine] = {}  # split: the statement, read dropped
        self.into: dict[int, list[cst.SimpleStatementLine]] = {}
        for mv in sorted(moves, key=lambda mv: mv.line):
            moved = mv.stmt
            if mv.read:
                assign = mv.stmt.body[0]
                assert isinstance(assign, cst.Assign) and isinstance(assign.value, cst.Call)
                detached = cst.Call(
                    func=cst.Attribute(value=read_value(assign.value), attr=cst.Name("detach"))
                )  # no autograd graph kept alive until the branch
                self.kept[id(mv.stmt)] = mv.stmt.with_changes(
                    body=[assign.with_changes(value=detached)]
                )
                read = cst.parse_statement(f"{mv.name} = {mv.read}\n")
                assert isinstance(read, cst.SimpleStatementLine)
                moved = read
            self.into.setdefault(id(mv.into), []).append(moved)

    def leave_IndentedBlock(
        self, original: cst.IndentedBlock, updated: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        return updated.with_changes(body=self._kept(original.body, updated.body))

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        return updated.with_changes(body=self._kept(original.body, updated.body))

    def _kept(self, old: object, new: object) -> list[cst.BaseStatement]:
        return [
            self.kept.get(id(o), n)
            for o, n in zip(old, new, strict=True)  # type: ignore[call-overload]
            if id(o) not in self.gone
        ]

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.If:
        stmts = self.into.get(id(original))
        if not stmts:
            return updated
        body = updated.body
        if isinstance(body, cst.SimpleStatementSuite):
            body = cst.IndentedBlock(
                body=[
                    cst.SimpleStatementLine(
                        body=body.body, trailing_whitespace=body.trailing_whitespace
                    )
                ]
            )
        assert isinstance(body, cst.IndentedBlock)
        return updated.with_changes(body=body.with_changes(body=[*stmts, *body.body]))


__all__ = ["BLOCK", "Move", "apply_moves", "dotted", "plan_move"]
