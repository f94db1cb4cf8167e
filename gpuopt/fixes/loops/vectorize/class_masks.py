"""Per-class masks: ``for c in range(C): m[:, c] = seg == c`` → one broadcast comparison.

    for c in range(NUM_CLASSES):        c = torch.arange(NUM_CLASSES, device=seg.device)
        masks[:, c] = seg == c     →     masks[:, :NUM_CLASSES] = seg.unsqueeze(1) == c.view(
                                             -1, *[1] * (seg.dim() - 1))

The written tensor is indexed by ``:`` slices, then the class, then ``:`` slices (or ``...``
then the class); the value is ``E == c`` / ``c == E`` / ``E.eq(c)`` / ``torch.eq(E, c)``,
possibly cast (``.float()``, ``.long()``, ``.to(dtype)`` ...), with ``E`` a name or attribute
that the loop does not write. The loop variable becomes every class at once (it is not read
after the loop: the analysis checked), shaped to broadcast against ``E`` with the classes at the
written position, so the comparison comes out in the tensor's own layout (no strided copy).
With the class first or after ``...`` any broadcast of ``E`` is kept; after ``k ≥ 1`` leading
slices ``E`` must have one dimension less than the tensor written (a precondition the check
evaluates on the recorded inputs).

On a CUDA run (``facts.cuda``) the comparison is written into the masks by one kernel, with no
boolean temporary followed by a copy::

    c = torch.arange(NUM_CLASSES, device=seg.device)
    torch.eq(
        seg.unsqueeze(1).expand_as(masks[:, :NUM_CLASSES]),
        c.view(-1, *[1] * (seg.dim() - 1)).expand_as(masks[:, :NUM_CLASSES]),
        out=masks[:, :NUM_CLASSES],
    )

Both operands are expanded to the written region first, so ``out=`` never resizes it: the shapes
that broadcast are exactly those the assignment accepts, and any other raises as it did. The
values are 0 and 1 in any dtype, so a cast in the loop (``(seg == c).float()``) is the store's
own. On a CPU the form is slower (TensorIterator computes into a temporary of the comparison's
dtype, then copies: 3.2x the assignment, measured on 80 classes of 512x512), so a CPU run keeps
the assignment; the CUDA kernel casts as it stores (GPU-only: benchmarks/gpu/check_codemods.py).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from gpuopt.fixes.loops.vectorize.match import Match
from gpuopt.fixes.loops.vectorize.rows import strip_parens
from gpuopt.source import code
from gpuopt.source.loop_facts import (
    LoopShape,
    ModuleFacts,
    Refusal,
    uses,
)

CASTS = frozenset("float long int bool double half byte short to type_as".split())
_FULL = m.SubscriptElement(slice=m.Slice(lower=None, upper=None, step=None))
_ELLIPSIS = m.SubscriptElement(slice=m.Index(value=m.Ellipsis()))


def _position(sub: cst.Subscript, var: str) -> tuple[int, bool] | None:
    """``(leading slices, after an ellipsis)`` when ``sub`` indexes the class once among full
    slices, else None."""
    elements = list(sub.slice)
    at = [i for i, el in enumerate(elements) if m.matches(el.slice, m.Index(value=m.Name(var)))]
    if len(at) != 1:
        return None
    k = at[0]
    before, after = elements[:k], elements[k + 1 :]
    if before and all(m.matches(e, _ELLIPSIS) for e in before) and len(before) == 1 and not after:
        return 0, True
    if all(m.matches(e, _FULL) for e in before + after):
        return k, False
    return None


def _compared(value: cst.BaseExpression, var: str) -> tuple[cst.BaseExpression, str] | None:
    """``(E, cast)`` for ``E == var`` possibly followed by one cast call."""
    cast = ""
    value = strip_parens(value)
    if isinstance(value, cst.Call) and m.matches(
        value.func, m.Attribute(attr=m.OneOf(*(m.Name(c) for c in CASTS)))
    ):
        assert isinstance(value.func, cst.Attribute)
        cast = "." + value.func.attr.value + code(value.with_changes(func=cst.Name("_")))[1:]
        value = strip_parens(value.func.value)
    name = m.Name(var)
    if isinstance(value, cst.Comparison) and len(value.comparisons) == 1:
        op = value.comparisons[0]
        if isinstance(op.operator, cst.Equal):
            if m.matches(op.comparator, name):
                return value.left, cast
            if m.matches(value.left, name):
                return op.comparator, cast
    if m.matches(value, m.Call(func=m.Attribute(attr=m.Name("eq")), args=[m.Arg(value=name)])):
        assert isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
        return value.func.value, cast
    if m.matches(
        value,
        m.Call(func=m.Attribute(attr=m.Name("eq")), args=[m.Arg(keyword=None), m.Arg(value=name)]),
    ):
        assert isinstance(value, cst.Call)
        return value.args[0].value, cast
    return None


def match(shape: LoopShape, facts: ModuleFacts) -> Match | Refusal | None:
    if shape.bounds is None or len(shape.body) != 1:
        return None
    stmt = shape.body[0]
    if not isinstance(stmt, cst.Assign) or not isinstance(stmt.targets[0].target, cst.Subscript):
        return None
    target = stmt.targets[0].target
    where = _position(target, shape.var)
    compared = _compared(stmt.value, shape.var)
    if where is None or compared is None:
        return None
    leading, ellipsis = where
    expr, cast = compared
    if not isinstance(target.value, cst.Name):
        return Refusal(f"writes into `{code(target.value)}`: gpuopt rewrites writes to local names")
    written = target.value.value
    if not isinstance(expr, (cst.Name, cst.Attribute)):
        return Refusal(
            f"compares `{code(expr)}`, an expression: the rewrite would evaluate it more than "
            "once; give it a name before the loop"
        )
    if uses(expr, shape.var) or uses(expr, written) or uses(stmt.value, written):
        return Refusal("the compared tensor depends on the loop or on the tensor written")
    if facts.torch is None:
        return Refusal("torch is not imported in this file (`import torch`)")
    e, torch, b, c = code(expr), facts.torch, shape.bounds, shape.var
    classes = f"{c} = {torch}.arange({b.arange()}, device={e}.device)"
    span = b.slice()
    if ellipsis:
        lhs, compare = f"{written}[..., {span}]", f"{e}.unsqueeze(-1) == {c}"
        pre: list[str] = []
    elif leading:
        lhs = f"{written}[{', '.join([':'] * leading + [span])}]"
        ones = f"*[1] * ({e}.dim() - {leading})"
        compare = f"{e}.unsqueeze({leading}) == {c}.view(-1, {ones})"
        pre = [f"{e}.dim() + 1 == {written}.dim()"]
    else:
        lhs, compare = f"{written}[{span}]", f"{e} == {c}.view(-1, *[1] * ({written}.dim() - 1))"
        pre = []
    if facts.cuda:
        return Match(
            "class-masks",
            [classes, _written_by_eq(lhs, compare, torch)],
            [written],
            f"`{written}` filled for every `{shape.var}` by one comparison written in place",
            [*pre, f"not {written}.requires_grad"],
        )
    value = f"({compare}){cast}" if cast else compare
    return Match(
        "class-masks",
        [classes, f"{lhs} = {value}"],
        [written],
        f"`{written}` filled for every `{shape.var}` by one broadcast comparison",
        pre,
    )


def _written_by_eq(lhs: str, compare: str, torch: str) -> str:
    """``torch.eq(a, b, out=lhs)`` for ``a == b``, each side expanded to the region written."""
    left, right = compare.split(" == ", 1)
    return (
        f"{torch}.eq(\n"
        f"    {left}.expand_as({lhs}),\n"
        f"    {right}.expand_as({lhs}),\n"
        f"    out={lhs},\n"
        ")"
    )


__all__ = ["match"]
