"""Scatter-adds through an index tensor: ``for i in range(n): hist[idx[i]] += v[i]`` →
``hist.index_put_((torch.as_tensor(idx[:n], device=hist.device),), torch.as_tensor(v[:n],
dtype=hist.dtype, device=hist.device), accumulate=True)``.

With ``accumulate=True`` repeated indices add up, as the loop's successive ``+=`` do; ``-=``
adds the negated values. Each ``idx[i]`` must be one index (a precondition the check
evaluates: ``idx[:n]`` is one-dimensional; a row of indices with repeats inside would add once
in the loop and twice here). A plain write through an index (``out[idx[i]] = v[i]``) is left
alone: with repeated indices the loop's last write wins, a vectorized write may keep any.
"""

from __future__ import annotations

import libcst as cst

from gpuopt.fixes.loops.vectorize.match import Match
from gpuopt.fixes.loops.vectorize.row_updates import target_of
from gpuopt.fixes.loops.vectorize.rows import Rows, atom
from gpuopt.source import code
from gpuopt.source.loop_facts import (
    LoopShape,
    ModuleFacts,
    Refusal,
    uses,
)


def match(shape: LoopShape, facts: ModuleFacts) -> Match | Refusal | None:
    if len(shape.body) != 1:
        return None
    stmt = shape.body[0]
    target = target_of(stmt)
    rows = Rows(shape)
    if not isinstance(target, cst.Subscript) or rows.index_is_var(target):
        return None
    first = target.slice[0].slice
    if not isinstance(first, cst.Index) or not rows.per_row(first.value):
        return None
    if isinstance(stmt, cst.Assign):
        return Refusal(
            f"writes `{code(target)} = ...` through an index: with repeated indices the loop's "
            "last write wins, a vectorized write may keep any of them"
        )
    assert isinstance(stmt, cst.AugAssign)
    if not isinstance(stmt.operator, (cst.AddAssign, cst.SubtractAssign)):
        return Refusal(f"`{code(stmt.operator).strip()}` through an index: only += and -= add up")
    if not isinstance(target.value, cst.Name):
        return Refusal(f"writes into `{code(target.value)}`: gpuopt rewrites writes to local names")
    name = target.value.value
    if uses(stmt.value, name) or uses(first.value, name):
        return Refusal(f"`{name}` is read while it is scattered into")
    problem = rows.check(target) or rows.check(stmt.value)
    if problem:
        return problem
    if facts.torch is None:
        return Refusal("torch is not imported in this file (`import torch`)")
    torch = facts.torch
    index = code(rows.vectorize(first.value))
    value = code(atom(rows.vectorize(stmt.value)))
    if isinstance(stmt.operator, cst.SubtractAssign):
        value = f"-{value}"
    new = (
        f"{name}.index_put_(\n"
        f"    ({torch}.as_tensor({index}, device={name}.device),),\n"
        f"    {torch}.as_tensor({value}, dtype={name}.dtype, device={name}.device),\n"
        "    accumulate=True,\n)"
    )
    return Match(
        "scatter-add",
        [new],
        [name],
        f"every `{code(stmt.operator).strip()}` into {name} in one accumulating index_put_",
        [f"{torch}.as_tensor({index}).dim() == 1"],
    )


__all__ = ["match"]
