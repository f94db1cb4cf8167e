"""Python-accumulated sums and maxima over a dimension.

    for i in range(len(x)):               if len(x) > 0:
        total = total + x[i] * w     →        total = total + (x * w).sum(0)
    for i in range(n):                    if n > 0:
        best = torch.maximum(best, s[i]) →    best = torch.maximum(best, s[:n].amax(0))

The body is one statement: ``acc = acc + E``, ``acc = E + acc``, ``acc = acc - E``, ``acc += E``,
``acc -= E``, or ``acc = torch.maximum(acc, E)`` (``torch.max``, ``torch.minimum``,
``torch.min``, ``acc.maximum(E)``), ``E`` an elementwise expression of rows, possibly reduced
whole per row (``E.sum()``, ``E.max()``, ``E.amax()``): the rows' terms are reduced over the new
first dimension (or whole). ``acc`` is read nowhere else in the loop. The statement runs only
when the loop would have run once at least (a guard, unless the literal bounds show it), so an
empty loop leaves ``acc`` as it was. Maxima are exact; a float sum is added in another order
(float rounding: the check reports ``tolerance``), an integer sum is exact.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from gpuopt.fixes.loops.vectorize.match import Match
from gpuopt.fixes.loops.vectorize.rows import Rows, atom, strip_parens
from gpuopt.source import code
from gpuopt.source.loop_facts import (
    LoopShape,
    ModuleFacts,
    Refusal,
    uses,
)

_EXTREMES = {"maximum": "max", "max": "max", "fmax": "max", "minimum": "min", "min": "min"}
_WHOLE = {"sum": ("sum", "sum"), "max": ("max", "amax"), "amax": ("max", "amax")}
_WHOLE.update({"min": ("min", "amin"), "amin": ("min", "amin")})


def _term(stmt: cst.BaseSmallStatement, torch: str) -> tuple[str, cst.BaseExpression, str] | None:
    """``(acc, E, kind)`` for an accumulation, kind "sum", "max" or "min"."""
    if isinstance(stmt, cst.AugAssign) and isinstance(stmt.target, cst.Name):
        if isinstance(stmt.operator, (cst.AddAssign, cst.SubtractAssign)):
            return stmt.target.value, stmt.value, "sum"
        return None
    if not (isinstance(stmt, cst.Assign) and isinstance(stmt.targets[0].target, cst.Name)):
        return None
    acc = stmt.targets[0].target.value
    value = strip_parens(stmt.value)
    me = m.Name(acc)
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add):
        if m.matches(value.left, me):
            return acc, value.right, "sum"
        if m.matches(value.right, me):
            return acc, value.left, "sum"
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Subtract):
        return (acc, value.right, "sum") if m.matches(value.left, me) else None
    if not isinstance(value, cst.Call) or not isinstance(value.func, cst.Attribute):
        return None
    kind = _EXTREMES.get(value.func.attr.value)
    args = [a for a in value.args if a.keyword is None]
    if kind is None or len(args) != len(value.args):
        return None
    if m.matches(value.func.value, m.Name(torch)) and len(args) == 2:
        if m.matches(args[0].value, me):
            return acc, args[1].value, kind
        if m.matches(args[1].value, me):
            return acc, args[0].value, kind
    if m.matches(value.func.value, me) and len(args) == 1 and kind != value.func.attr.value:
        return acc, args[0].value, kind  # acc.maximum(E), not acc.max(E)
    return None


def _whole(expr: cst.BaseExpression, kind: str) -> tuple[cst.BaseExpression, str | None]:
    """``E.sum()`` → (E, "sum"); anything else → (expr, None)."""
    e = strip_parens(expr)
    if (
        isinstance(e, cst.Call)
        and not e.args
        and isinstance(e.func, cst.Attribute)
        and _WHOLE.get(e.func.attr.value, ("", ""))[0] == kind
    ):
        return e.func.value, _WHOLE[e.func.attr.value][1]
    return expr, None


def match(shape: LoopShape, facts: ModuleFacts) -> Match | Refusal | None:
    if len(shape.body) != 1:
        return None
    stmt = shape.body[0]
    found = _term(stmt, facts.torch or "torch")
    if found is None:
        return None
    acc, term, kind = found
    if acc == shape.var or uses(term, acc):
        return Refusal(f"`{acc}` is read inside its own term")
    if shape.carried != {acc}:
        return None
    inner, whole = _whole(term, kind)
    rows = Rows(shape)
    if not rows.per_row(inner):
        return Refusal(f"the term added to `{acc}` does not depend on the loop")
    problem = rows.check(inner)
    if problem:
        return problem
    stacked = code(atom(rows.vectorize(inner)))
    reduce = {"sum": "sum", "max": "amax", "min": "amin"}[kind]
    reduced = f"{stacked}.{whole}()" if whole else f"{stacked}.{reduce}(0)"
    new = code(stmt.deep_replace(term, cst.parse_expression(reduced)))
    what = {"sum": "sum", "max": "maximum", "min": "minimum"}[kind]
    return Match(
        "sums" if kind == "sum" else "maxima",
        [new],
        [acc],
        f"the {what} into {acc} over every row at once",
        guard=True,
    )


__all__ = ["match"]
