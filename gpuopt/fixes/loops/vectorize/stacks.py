"""Per-sample results collected with ``torch.stack`` / ``torch.cat``, or appended to a list.

    torch.stack([x[i] * w for i in range(n)])         →  x[:n] * w
    torch.stack([g(x[i], w) for i in range(n)])       →  torch.vmap(g, in_dims=(0, None))(x[:n], w)
    torch.cat([f(row) for row in x])                  →  torch.vmap(f)(x).flatten(0, 1)
    for i in range(n): outs.append(f(x[i]))           →  outs.extend(torch.vmap(f)(x[:n]).unbind(0))

An elementwise expression of rows is computed on the stacked rows directly (with ``.clone()``
when it would otherwise be a view of the input: ``torch.stack`` makes a new tensor). A call of
a pure tensor function — a function of this file that is straight-line code calling only torch
(:meth:`~gpuopt.source.loop_facts.ModuleFacts.pure_function`), or a torch
function — goes through ``torch.vmap``: rows as mapped arguments (``in_dims`` 0), the rest
unmapped (``None``); keyword arguments must not depend on the row. A module call
(``model(x[i])``) is left alone: its forward may have effects (buffers, counters) that gpuopt
cannot see. ``dim=d`` of the stack moves the new dimension there (``.movedim(0, d)``); ``cat``
joins the first two dimensions. A list filled by ``append`` gets the rows of the batched result
(``.unbind(0)``), views as ``x[i]`` was. vmap's batched kernels may round floats differently:
the check says ``exact`` or ``tolerance``.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from gpuopt.fixes.loops.vectorize.match import Match
from gpuopt.fixes.loops.vectorize.rows import Rows, atom, strip_parens
from gpuopt.source import code
from gpuopt.source.loop_facts import (
    TORCH_MODULES,
    LoopShape,
    ModuleFacts,
    Refusal,
    call_problem,
    callee,
    header,
    uses,
)

RESULT = "__gpuopt_result__"
_VIEWS = frozenset("float double half long int bool byte short to type type_as contiguous".split())


def _vmapped(expr: cst.BaseExpression, rows: Rows, facts: ModuleFacts) -> str | Refusal:
    call = strip_parens(expr)
    if not isinstance(call, cst.Call):
        return Refusal(f"`{code(expr)}` is neither elementwise nor a call of a pure function")
    owner, name = callee(call)
    if owner is None:
        return Refusal(f"`{code(call.func)}(...)`: a method, not a pure function to vmap")
    if owner == "":
        if name not in facts.functions:
            return Refusal(
                f"calls `{name}(...)`, not a function of this file: a module's forward may have "
                "effects (buffers, counters) that torch.vmap would run once"
            )
        impure = facts.pure_function(name)
        if impure:
            return Refusal(f"`{name}` is not a pure tensor function: {impure}")
    elif call_problem(call):
        return Refusal(str(call_problem(call)))
    if facts.torch is None:
        return Refusal("torch is not imported in this file (`import torch`)")
    dims, args = [], []
    for arg in call.args:
        if arg.star:
            return Refusal(f"a splat in `{code(call.func)}(...)`")
        if not rows.per_row(arg.value):
            args.append(code(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)))
            if arg.keyword is None:
                dims.append("None")
            continue
        if arg.keyword is not None:
            return Refusal(f"a row passed by keyword to `{code(call.func)}(...)`")
        problem = rows.check(arg.value)
        if problem:
            return problem
        args.append(code(rows.vectorize(arg.value)))
        dims.append("0")
    if "0" not in dims:
        return Refusal("no argument of the call depends on the row")
    listed = f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"
    mapped = "" if all(d == "0" for d in dims) else f", in_dims={listed}"
    return f"{facts.torch}.vmap({code(call.func)}{mapped})({', '.join(args)})"


def _as_value(expr: cst.BaseExpression, var: str) -> bool:
    """``var`` is used in ``expr`` outside an index (``x == i``, not ``x[i]``)."""
    indexed = 0
    for sub in m.findall(expr, m.Subscript()):
        assert isinstance(sub, cst.Subscript)
        indexed += sum(len(m.findall(el, m.Name(var))) for el in sub.slice)
    return len(m.findall(expr, m.Name(var))) > indexed


def _over_values(expr: cst.BaseExpression, rows: Rows, facts: ModuleFacts) -> str | Refusal:
    """``E(i)`` with the loop variable as a value: ``torch.vmap(lambda i: E)`` over
    ``torch.arange(...)`` on the device of the tensor it is combined with."""
    var, bounds = rows.var, rows.bounds
    assert bounds is not None
    subs = [s for s in m.findall(expr, m.Subscript()) if isinstance(s, cst.Subscript)]
    if any(uses(el, var) for sub in subs for el in sub.slice):
        return Refusal(f"uses `{var}` both as a value and as an index")
    for call in m.findall(expr, m.Call()):
        assert isinstance(call, cst.Call)
        owner, name = callee(call)
        problem = facts.pure_function(name) if owner == "" else call_problem(call)
        if problem:
            return Refusal(str(problem))
    beside = [
        other
        for node in m.findall(expr, m.Comparison() | m.BinaryOperation())
        for other in _operands(node)
        if any(m.matches(o, m.Name(var)) for o in _operands(node))
        and isinstance(other, (cst.Name, cst.Attribute))
        and not m.matches(other, m.Name(var))
    ]
    if not beside or facts.torch is None:
        return Refusal(f"`{var}` is not compared with or combined with a tensor by name")
    torch, dev = facts.torch, code(beside[0])
    classes = f"{torch}.arange({bounds.arange()}, device={dev}.device)"
    return f"{torch}.vmap(lambda {var}: {code(expr)})({classes})"


_CASTS = frozenset("float long int bool double half byte short to type_as".split())


def _class_chain(expr: cst.BaseExpression, var: str, torch: str) -> tuple[str, str] | None:
    """``(preamble, stacked)`` for ``X == i`` followed by casts and ``.unsqueeze(k)`` (the
    per-class masks of a list, as TransUNet's DiceLoss builds them): the loop variable becomes
    every class, shaped to broadcast against ``X``, and each literal ``dim >= 0`` moves up one
    for the new first dimension. None when ``expr`` is not such a chain."""
    e = strip_parens(expr)
    if isinstance(e, cst.Call) and isinstance(e.func, cst.Attribute):
        inner = _class_chain(e.func.value, var, torch)
        name, args = e.func.attr.value, e.args
        if inner is None or (name not in _CASTS and name != "unsqueeze"):
            return None
        if name == "unsqueeze":
            if len(args) != 1 or not isinstance(args[0].value, cst.Integer):
                return None
            k = int(args[0].value.value)
            return inner[0], f"{inner[1]}.unsqueeze({k + 1})"
        return inner[0], f"{inner[1]}.{name}{code(e.with_changes(func=cst.Name('_')))[1:]}"
    if not (isinstance(e, cst.Comparison) and len(e.comparisons) == 1):
        return None
    op = e.comparisons[0]
    sides = (e.left, op.comparator)
    if not isinstance(op.operator, cst.Equal) or not any(m.matches(s, m.Name(var)) for s in sides):
        return None
    other = sides[1] if m.matches(sides[0], m.Name(var)) else sides[0]
    if not isinstance(other, (cst.Name, cst.Attribute)) or uses(other, var):
        return None
    x = code(other)
    return x, f"({x} == {var}.view(-1, *[1] * {x}.dim()))"


def _operands(node: cst.CSTNode) -> list[cst.BaseExpression]:
    if isinstance(node, cst.Comparison):
        return [node.left, *(c.comparator for c in node.comparisons)]
    assert isinstance(node, cst.BinaryOperation)
    return [node.left, node.right]


def batched(expr: cst.BaseExpression, rows: Rows, facts: ModuleFacts) -> tuple[str, str] | Refusal:
    """``(text, pattern)``: the rows' results at once, directly or through torch.vmap."""
    direct = rows.check(expr)
    if direct is None:
        return code(atom(rows.vectorize(expr))), "stacks"
    if rows.bounds is not None and _as_value(expr, rows.var):
        over = _over_values(expr, rows, facts)
        return over if isinstance(over, Refusal) else (over, "vmap")
    if not isinstance(strip_parens(expr), cst.Call):
        return direct
    vmapped = _vmapped(expr, rows, facts)
    return vmapped if isinstance(vmapped, Refusal) else (vmapped, "vmap")


def _aliases(text: str) -> bool:
    """The direct result may be a view of an input (``x[:n]``, ``x[:n].float()``)."""
    node = cst.parse_expression(text)
    if isinstance(node, (cst.Name, cst.Attribute, cst.Subscript)):
        return True
    return bool(
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in _VIEWS
        and _aliases(code(node.func.value))
    )


def match(shape: LoopShape, facts: ModuleFacts) -> Match | Refusal | None:
    """The loop form: one ``outs.append(E)`` per iteration."""
    if len(shape.body) != 1 or not isinstance(shape.body[0], cst.Expr):
        return None
    call = shape.body[0].value
    if not m.matches(call, m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("append")))):
        return None
    assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
    assert isinstance(call.func.value, cst.Name)
    target = call.func.value.value
    if len(call.args) != 1 or call.args[0].keyword or call.args[0].star:
        return Refusal("`append` with other than one argument")
    value = call.args[0].value
    if uses(value, target):
        return Refusal(f"`{target}` is read while it is filled")
    b = shape.bounds
    chain = _class_chain(value, shape.var, facts.torch or "torch") if b is not None else None
    if chain is not None and b is not None and facts.torch is not None:
        classes = f"{shape.var} = {facts.torch}.arange({b.arange()}, device={chain[0]}.device)"
        new = f"{target}.extend({chain[1]}.unbind(0))"
        what = f"the masks appended to {target} for every `{shape.var}` in one comparison"
        return Match("class-masks", [classes, new], [target], what)
    found = batched(value, Rows(shape), facts)
    if isinstance(found, Refusal):
        return found
    text, pattern = found
    new = f"{target}.extend({text}.unbind(0))"
    what = f"every row's result appended to {target} at once"
    return Match(pattern, [new], [target], what, guard=pattern == "vmap")


def match_comprehension(call: cst.Call, facts: ModuleFacts) -> Match | Refusal | None:
    """``torch.stack([E for v in ...], dim)`` / ``torch.cat(...)``."""
    owner, name = callee(call)
    if owner not in TORCH_MODULES or name not in ("stack", "cat") or not call.args:
        return None
    comp = call.args[0].value
    if call.args[0].keyword or not isinstance(comp, cst.ListComp):
        return None
    dims = [a for a in call.args[1:] if a.keyword is None or a.keyword.value == "dim"]
    if len(dims) != len(call.args) - 1 or len(dims) > 1:
        return Refusal(f"torch.{name}(...) with other arguments than dim")
    dim = 0
    if dims:
        d = dims[0].value
        negative = m.matches(d, m.UnaryOperation(operator=m.Minus(), expression=m.Integer()))
        if not isinstance(d, cst.Integer) and not negative:
            return Refusal(f"torch.{name}(...) along a dim that is not a literal")
        dim = int(code(d))
    loop = comp.for_in
    if loop.ifs or loop.inner_for_in is not None or not isinstance(loop.target, cst.Name):
        return Refusal("a comprehension with a filter, a nested loop or unpacking")
    found = header(loop.iter, facts.scopes.get(call), facts)
    if isinstance(found, Refusal):
        return found
    if found[0] is not None and found[0].guard:
        return Refusal(
            f"the comprehension's bound `{found[0].stop}` is not known to be ≥ 0: an "
            "expression has no room for a guard"
        )
    shape = LoopShape(comp, loop.target.value, facts.line(comp), found[0], found[1], [])
    got = batched(comp.elt, Rows(shape), facts)
    if isinstance(got, Refusal):
        return got
    text, pattern = got
    if pattern == "stacks" and _aliases(text):
        text += ".clone()"
    if name == "stack" and dim:
        text += f".movedim(0, {dim})"
    elif name == "cat":
        if dim < 0:
            return Refusal("torch.cat(...) along a negative dim")
        text += f".movedim(0, {dim}).flatten({dim}, {dim + 1})" if dim else ".flatten(0, 1)"
    return Match(pattern, [text], [RESULT], f"torch.{name} of every row's result at once")


__all__ = ["RESULT", "batched", "match", "match_comprehension"]
