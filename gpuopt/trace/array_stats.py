"""Small numpy set helpers the trace analyses share, written for speed on one-shot runs.

Why not ``np.unique`` / ``np.isin``: with numpy 2.x the first checks for masked arrays and so
imports ``numpy.ma`` on its first call (15-20 ms, more than some whole analyses), and ``np.isin``
sorts *both* arrays (an argsort of every event) where the analyses only ask "is this id in that
set". ``gpuopt report TRACE`` runs once per process, so these costs are paid on every report. The
helpers give the same results for what the analyses pass: integer codes and ids (they do not
merge NaNs, which never occur there). Medians and percentiles: :mod:`gpuopt.stats.quantiles`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from gpuopt.trace.columns import BoolArray, IntArray


def unique(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Sorted distinct values of ``a`` (``np.unique(a)`` without importing ``numpy.ma``)."""
    s = np.sort(a, axis=None)
    if s.size < 2:
        return s
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def unique_inverse(a: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], IntArray]:
    """``np.unique(a, return_inverse=True)`` for a 1-d array: distinct values and, per element,
    the position of its value among them."""
    order = np.argsort(a, kind="stable")
    s = a[order]
    new = np.empty(s.size, dtype=bool)
    new[:1] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    inverse = np.empty(s.size, dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return s[new], inverse


def member(values: IntArray, pool: IntArray) -> BoolArray:
    """Per element of ``values``: does it occur in ``pool`` (``np.isin`` for integer ids: by a
    lookup table over the pool's range when that is small, else by a binary search in the sorted
    pool; either way the large ``values`` array is never sorted)."""
    if pool.size == 0:
        return np.zeros(values.shape, dtype=bool)
    lo, hi = int(pool.min()), int(pool.max())
    if hi - lo <= 4 * (values.size + pool.size):
        table = np.zeros(hi - lo + 1, dtype=bool)
        table[pool - lo] = True
        inside = (values >= lo) & (values <= hi)
        return inside & table[np.where(inside, values - lo, 0)]
    s = np.sort(pool, axis=None)
    pos = s.searchsorted(values)
    np.minimum(pos, s.size - 1, out=pos)
    found: BoolArray = s[pos] == values
    return found


def code_mask(codes: IntArray, wanted: npt.NDArray[Any] | list[int], n_codes: int) -> BoolArray:
    """Per element of ``codes`` (indices into a string table of ``n_codes`` entries): is it one of
    ``wanted`` (``np.isin`` by a lookup table: the codes are small, dense integers)."""
    table = np.zeros(max(n_codes, 1), dtype=bool)
    table[np.asarray(wanted, dtype=np.int64)] = True
    return table[codes]
