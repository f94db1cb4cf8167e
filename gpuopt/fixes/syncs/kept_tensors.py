"""A list of values read every step keeps the tensors instead; they are read where they are used.

    history = []                                 history = []
    for step in range(n):                        for step in range(n):
        ...                                          ...
        history.append(loss.item())       →          history.append(loss.detach())
        if step % 20 == 0:                           if step % 20 == 0:
            print(f"{history[-1]:.4f}")                  print(f"{history[-1].item():.4f}")
    print(sum(history) / len(history))           print(sum((torch.stack(history).flatten().tolist()
                                                            if history else [])) / len(history))

``.item()`` of the kept tensor (and ``.tolist()`` of the stacked ones: one read for the whole
list) gives the same Python numbers the loop stored, so what is printed is the same, byte for
byte. The rewrite is made only when the analysis proves it:

* the list is a local name, bound once to ``[]``, not declared ``global``/``nonlocal`` and not
  read in a nested function; this is its only ``append``; the value appended is exactly
  ``T.item()`` or ``float(T)``;
* every other use of the list is ``len(...)``, an element (``history[k]``, read back with
  ``.item()`` / ``float(...)``), or the list or a slice of it given to a pure consumer
  (``print``, ``sum``, ``min``, ``sorted``, numpy, ``for v in ...``; the consumer gets the
  numbers); anything else (``history.clear()``, passing it to a function gpuopt cannot prove
  pure, returning it) is refused with its line;
* no read of the list runs every step (outside an ``if`` of the same loop): that read would sync
  as before;
* the tensor ``T`` is not changed in place in the loop (``loss += reg`` on a tensor, ``loss[0] =
  ...``, ``loss.mul_(...)``): the list keeps ``T.detach()``, which shares its memory. A subscript
  (a view of a larger tensor) is kept as ``.detach().clone()``, so the list does not hold the
  larger tensor's memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m
from libcst.metadata import ComprehensionScope

from gpuopt.fixes.syncs.effects import Effects
from gpuopt.fixes.syncs.read_flow import Flow, read_value, shorten, use_of
from gpuopt.source import code

_EMPTY_LIST = m.List(elements=[])


@dataclass
class Kept:
    """One list that keeps tensors: the expressions to replace (node → new text)."""

    name: str
    line: int
    replace: dict[cst.CSTNode, str] = field(default_factory=dict)
    read_lines: list[int] = field(default_factory=list)


def _list_binding(flow: Flow, scope: object, name: str) -> str | None:
    nodes = flow.assignments(scope, name)  # type: ignore[arg-type]
    if len(nodes) != 1:
        return f"`{name}` is assigned {len(nodes)} times"
    parent = flow.parents.get(nodes[0])
    assign = flow.parents.get(parent) if isinstance(parent, cst.AssignTarget) else None
    if not (isinstance(assign, cst.Assign) and m.matches(assign.value, _EMPTY_LIST)):
        return f"`{name}` is not bound to an empty list `[]` (line {flow.line(nodes[0])})"
    return None


def _in_place_change(flow: Flow, loop: cst.CSTNode, root: str) -> str | None:
    """Where ``root`` is changed in place in ``loop`` (its line and code), or None."""
    for node in m.findall(loop, m.AugAssign() | m.AssignTarget()):
        target = node.target  # type: ignore[attr-defined]
        aug = isinstance(node, cst.AugAssign)
        stored = isinstance(target, (cst.Subscript, cst.Attribute))
        base = target
        while isinstance(base, (cst.Subscript, cst.Attribute)):
            base = base.value
        if isinstance(base, cst.Name) and base.value == root and (aug or stored):
            return f"line {flow.line(node)} (`{shorten(code(node), 40)}`)"
    for call in m.findall(loop, m.Call(func=m.Attribute(value=m.Name(root)))):
        assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
        attr = call.func.attr.value
        if attr.endswith("_") and not attr.endswith("__"):
            return f"line {flow.line(call)} (`{shorten(code(call), 40)}`)"
    return None


def _conversion(torch: str, listed: str, cast: str) -> str:
    as_float = ".double()" if cast == "float" else ""
    return f"({torch}.stack({listed}).flatten(){as_float}.tolist() if {listed} else [])"


class _Uses:
    """The list's uses, each turned into its replacement or a reason."""

    def __init__(self, flow: Flow, effects: Effects, kept: Kept, torch: str | None) -> None:
        self.flow, self.effects, self.kept, self.torch = flow, effects, kept, torch

    def element(self, sub: cst.Subscript, cast: str) -> None:
        text = code(sub)
        self.kept.replace[sub] = f"float({text})" if cast == "float" else f"{text}.item()"

    def whole(self, node: cst.BaseExpression, cast: str) -> str | None:
        if self.torch is None:
            return "torch is not imported in this file (`import torch`): the list could not be read"
        self.kept.replace[node] = _conversion(self.torch, code(node), cast)
        return None

    def consumer(self, node: cst.BaseExpression) -> str | None:
        """None when the list (or slice) ``node`` goes to a consumer that only reads it."""
        parent = self.flow.parents.get(node)
        if isinstance(parent, (cst.For, cst.CompFor)) and parent.iter is node:
            return None
        if isinstance(parent, (cst.FormattedStringExpression,)):
            return None
        arg = parent if isinstance(parent, cst.Arg) else None
        call = self.flow.parents.get(arg) if arg is not None else None
        if isinstance(call, cst.Call) and arg is not None and arg.keyword is None:
            if code(call.func) == "print" or not self.effects.of_call(call, {}, reads_ok=True):
                return None
            func = shorten(code(call.func), 40)
            return f"it is passed to `{func}(...)`, which gpuopt cannot prove pure"
        return use_of(self.flow, node).sentence("it", every_step=False)


def plan_kept(
    flow: Flow,
    effects: Effects,
    append: cst.Call,
    read: cst.Call,
    declared: set[str],
    torch: str | None,
) -> Kept | str:
    """The list of ``append`` (``NAME.append(read)``) keeping tensors, or why not."""
    assert isinstance(append.func, cst.Attribute)
    owner = append.func.value
    if not isinstance(owner, cst.Name):
        return f"the list `{shorten(code(owner))}` is not a local name"
    name = owner.value
    cast = "float" if m.matches(read.func, m.Name("float")) else "item"
    if not (cast == "float" or m.matches(read.func, m.Attribute(attr=m.Name("item")))):
        return f"the value appended is `{shorten(code(read))}`, not `.item()` or `float(...)`"
    scope = flow.scope(owner)
    loop = flow.loop(append)
    if scope is None or loop is None or name in declared:
        return f"`{name}` is not a local list appended in a loop"
    problem = _list_binding(flow, scope, name)
    if problem:
        return problem
    tensor = read_value(read)
    root = tensor
    while isinstance(root, (cst.Subscript, cst.Attribute)):
        root = root.value
    if isinstance(root, cst.Name):
        changed = _in_place_change(flow, loop, root.value)
        if changed:
            return f"`{root.value}` is changed in place at {changed}: the kept tensor would change"
    kept = Kept(name, flow.line(append))
    suffix = ".detach().clone()" if isinstance(tensor, cst.Subscript) else ".detach()"
    kept.replace[read] = code(tensor) + suffix
    uses = _Uses(flow, effects, kept, torch)
    for access in flow.accesses(scope, name):
        problem = _one_use(flow, uses, access.node, access.scope is scope, append, loop, cast)
        if problem:
            return f"`{name}`: {problem} (line {flow.line(access.node)})"
    return kept


def _one_use(
    flow: Flow,
    uses: _Uses,
    node: cst.CSTNode,
    same_scope: bool,
    append: cst.Call,
    loop: cst.CSTNode,
    cast: str,
) -> str | None:
    if not same_scope and not isinstance(scope_of(flow, node), ComprehensionScope):
        return "it is read in a nested function or class"
    assert isinstance(node, cst.Name)
    parent = flow.parents.get(node)
    if isinstance(parent, cst.Attribute) and flow.parents.get(parent) is append:
        return None
    if isinstance(parent, cst.Attribute):
        return f"`{shorten(code(flow.parents.get(parent) or parent), 40)}` uses it otherwise"
    if flow.within(node, loop) and flow.branch(node, loop) is None:
        return "it is read every step: that read would still wait for the device"
    arg = parent if isinstance(parent, cst.Arg) else None
    call = flow.parents.get(arg) if arg is not None else None
    if isinstance(call, cst.Call) and m.matches(call.func, m.Name("len")):
        return None
    if isinstance(parent, cst.Subscript) and parent.value is node:
        holder = flow.parents.get(parent)
        if isinstance(holder, (cst.AssignTarget, cst.AugAssign, cst.Del)):
            return f"it is changed (`{shorten(code(holder), 40)}`)"
        if _is_element(parent):
            uses.element(parent, cast)
            return None
        problem = uses.consumer(parent)
        return problem or uses.whole(parent, cast)
    problem = uses.consumer(node)
    return problem or uses.whole(node, cast)


def scope_of(flow: Flow, node: cst.CSTNode) -> object:
    return flow.scope(node)


def _is_element(sub: cst.Subscript) -> bool:
    return len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Index)


__all__ = ["Kept", "plan_kept"]
