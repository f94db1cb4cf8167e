"""Windows of a numpy array gathered one sample at a time, as one fancy-index gather.

    torch.stack([torch.from_numpy((data[i:i+bs]).astype(np.int64)) for i in ix])
        →  torch.from_numpy((data[np.asarray(ix)[:, None] + np.arange(bs)]).astype(np.int64))

A character-level GPT trainer's ``get_batch`` (nanoGPT) builds each batch this way: a slice
of ``bs`` tokens per random start ``i``, copied, cast, turned into a tensor, then stacked — ``B``
numpy slices and casts, ``B`` tensors and a stack per batch. One fancy index takes every window
at once (``data`` may be an ``np.memmap``: the gather reads the same bytes into a new array),
one cast, one tensor. The batch is the same bit for bit: the same elements, the same dtype
(``astype`` acts element by element), the same shape ``(B, bs)``, contiguous.

The pattern, each part checked:

* ``torch.stack([E for i in IDX])`` (dim 0) over a name or attribute ``IDX`` (an index tensor,
  array or list: it becomes ``np.asarray(IDX)``; a CUDA tensor would not, and fails the check)
  or over ``range(...)`` (``np.arange(...)``);
* ``E`` is ``torch.from_numpy(W)`` (or ``torch.as_tensor`` / ``torch.tensor``) of ``W``: a row
  ``A[S]`` (gathered as ``A[np.asarray(IDX) + c]``) or the window ``A[S:S + K]`` — ``S`` is
  ``i``, ``i + c`` or ``c + i`` with ``c`` not depending on ``i``, the stop is written
  ``S + K`` — then element-wise numpy methods only (``astype``, ``copy``), which have no side
  effects on an array;
* ``A`` and ``K`` do not depend on ``i``, and numpy is imported in the file.

A window that runs past the end of ``A`` is shorter in the loop (and ``torch.stack`` refuses
rows of different lengths) but raises ``IndexError`` in the gather; a negative start wraps
around in both the same way only while the window does not reach the end. The check on the
run's inputs compares the two batches before the rewrite is used.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from gpuopt.fixes.loops.vectorize.match import Match
from gpuopt.fixes.loops.vectorize.rows import strip_parens
from gpuopt.fixes.loops.vectorize.stacks import RESULT
from gpuopt.source import code
from gpuopt.source.loop_facts import (
    TORCH_MODULES,
    ModuleFacts,
    Refusal,
    callee,
    uses,
)

# numpy methods that act element by element on an array and change nothing: on the gathered
# array they give the stacked rows' results
ELEMENTWISE_ARRAY = frozenset({"astype", "copy"})
TO_TENSOR = frozenset({"from_numpy", "as_tensor", "tensor"})


def _window(sub: cst.Subscript, var: str) -> tuple[str, str, str | None] | Refusal:
    """``(array, start as a function of the loop variable, length)`` of ``A[S:S + K]``; the
    length None for one row ``A[S]``."""
    if len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Index):
        row = strip_parens(sub.slice[0].slice.value)
        if uses(sub.value, var) or not _shifted(row, var):
            return Refusal(f"`{code(sub)}` is not a row `A[i]` or a window `A[i:i + K]`")
        return code(sub.value), code(row), None
    if len(sub.slice) != 1 or not isinstance(sub.slice[0].slice, cst.Slice):
        return Refusal(f"`{code(sub)}` is not one slice `A[i:i + K]`")
    sl = sub.slice[0].slice
    if sl.step is not None or sl.lower is None or sl.upper is None:
        return Refusal(f"`{code(sub)}`: a window needs a start and a stop, and no step")
    start, stop = strip_parens(sl.lower), strip_parens(sl.upper)
    if uses(sub.value, var):
        return Refusal(f"the array `{code(sub.value)}` depends on `{var}`")
    if not (
        isinstance(stop, cst.BinaryOperation)
        and isinstance(stop.operator, cst.Add)
        and code(strip_parens(stop.left)) == code(start)
        and not uses(stop.right, var)
    ):
        return Refusal(f"the window's stop `{code(stop)}` is not written `{code(start)} + K`")
    if not _shifted(start, var):
        return Refusal(f"the window's start `{code(start)}` is not `{var}` or `{var} + c`")
    return code(sub.value), code(start), code(stop.right)


def _shifted(start: cst.BaseExpression, var: str) -> bool:
    """``start`` is ``var``, ``var + c`` or ``c + var`` (``c`` not using ``var``)."""
    if m.matches(start, m.Name(var)):
        return True
    if isinstance(start, cst.BinaryOperation) and isinstance(start.operator, cst.Add):
        left, right = strip_parens(start.left), strip_parens(start.right)
        if m.matches(left, m.Name(var)) and not uses(right, var):
            return True
        if m.matches(right, m.Name(var)) and not uses(left, var):
            return True
        return _shifted(left, var) and not uses(right, var)
    return False


def _methods(expr: cst.BaseExpression) -> tuple[cst.BaseExpression, list[str]] | Refusal:
    """The window under a chain of element-wise array methods, and the chain's text."""
    chain: list[str] = []
    e = strip_parens(expr)
    while isinstance(e, cst.Call) and isinstance(e.func, cst.Attribute):
        name = e.func.attr.value
        if name not in ELEMENTWISE_ARRAY:
            return Refusal(
                f"`.{name}()` on a window: only element-wise array methods (astype, copy) give "
                "the gathered array's result"
            )
        if any(a.star for a in e.args):
            return Refusal(f"a splat in `.{name}(...)`")
        chain.append(f".{name}{code(e.with_changes(func=cst.Name('_')))[1:]}")
        e = strip_parens(e.func.value)
    return e, chain[::-1]


def match_comprehension(call: cst.Call, facts: ModuleFacts) -> Match | Refusal | None:
    """``torch.stack([torch.from_numpy(A[i:i+K]...) for i in IDX])``, or None when the call is
    not a stack of tensors made from numpy windows."""
    owner, name = callee(call)
    if owner not in TORCH_MODULES or name != "stack" or len(call.args) != 1:
        return None
    comp = call.args[0].value
    if call.args[0].keyword or not isinstance(comp, cst.ListComp):
        return None
    elt = strip_parens(comp.elt)
    if not isinstance(elt, cst.Call):
        return None
    to_owner, to_name = callee(elt)
    if to_owner not in TORCH_MODULES or to_name not in TO_TENSOR or len(elt.args) != 1:
        return None
    loop = comp.for_in
    if loop.ifs or loop.inner_for_in is not None or not isinstance(loop.target, cst.Name):
        return Refusal("a comprehension with a filter, a nested loop or unpacking")
    var = loop.target.value
    found = _methods(elt.args[0].value)
    if isinstance(found, Refusal):
        return found
    window, chain = found
    if not isinstance(window, cst.Subscript):
        return None
    parts = _window(window, var)
    if isinstance(parts, Refusal):
        return parts
    if facts.numpy is None:
        return Refusal("numpy is not imported in this file (`import numpy as np`)")
    if any(uses(cst.parse_expression("_" + c), var) for c in chain):
        return Refusal(f"the cast depends on `{var}`")
    starts = _starts(loop.iter, facts.numpy)
    if isinstance(starts, Refusal):
        return starts
    array, start, length = parts
    np = facts.numpy
    if length is None:  # rows: the index is the loop's values themselves, not a column
        index = _substitute(start, var, starts.removesuffix("[:, None]"))
    else:
        index = _substitute(start, var, starts) + f" + {np}.arange({length})"
    text = f"{code(elt.func)}(({array}[{index}]){''.join(chain)})"
    what = "row" if length is None else "window"
    return Match(
        "numpy-gathers",
        [text],
        [RESULT],
        f"every {what} of `{array}` gathered by one fancy index",
    )


def _starts(it: cst.BaseExpression, np: str) -> str | Refusal:
    """The loop's values as a column ``(B, 1)`` of a numpy array."""
    if isinstance(it, (cst.Name, cst.Attribute)):
        return f"{np}.asarray({code(it)})[:, None]"
    if m.matches(it, m.Call(func=m.Name("range"))):
        assert isinstance(it, cst.Call)
        if any(a.keyword or a.star for a in it.args):
            return Refusal("range(...) with keywords or a splat")
        return f"{np}.arange({', '.join(code(a.value) for a in it.args)})[:, None]"
    return Refusal(f"the comprehension iterates over `{code(it)}`: a name or range(...) is needed")


def _substitute(start: str, var: str, column: str) -> str:
    expr = cst.parse_expression(start)
    new = expr.visit(_Rename(var, column))
    assert isinstance(new, cst.BaseExpression)
    return code(new)


class _Rename(cst.CSTTransformer):
    def __init__(self, var: str, column: str) -> None:
        self.var, self.column = var, cst.parse_expression(column)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self.column if original.value == self.var else updated


__all__ = ["ELEMENTWISE_ARRAY", "match_comprehension"]
