"""Small numpy helpers the trace analyses share, written for speed on one-shot runs.

Why not ``np.unique`` / ``np.median`` / ``np.percentile`` / ``np.isin``: with numpy 2.x the first
three check for masked arrays and so import ``numpy.ma`` on their first call (15-20 ms, more than
some whole analyses), and ``np.isin`` sorts *both* arrays (an argsort of every event) where the
analyses only ask "is this id in that set". ``gpuopt report TRACE`` runs once per process, so
these costs are paid on every report. The helpers give the same results (the same floats) for
what the analyses pass: integer codes and ids to the set functions (they do not merge NaNs, which
never occur there), 1-d float samples to ``median``/``percentile``.
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


def median(x: npt.ArrayLike) -> float:
    """``np.median`` of a non-empty 1-d sequence (which imports ``numpy.ma`` to check for masked
    input): the middle value, or the mean of the two middle ones; NaN if any value is NaN."""
    s = np.sort(np.asarray(x, dtype=np.float64), axis=None)
    if np.isnan(s[-1]):
        return float("nan")
    h = s.size // 2
    return float(s[h]) if s.size % 2 else float((s[h - 1] + s[h]) / 2)


def percentile(x: npt.ArrayLike, p: float) -> float:
    """``np.percentile(x, p)`` (default "linear" method) of a non-empty 1-d sequence, with the same
    arithmetic (so the same float); ``np.percentile`` imports ``numpy.ma`` via ``np.unique``."""
    s = np.sort(np.asarray(x, dtype=np.float64), axis=None)
    if np.isnan(s[-1]):
        return float("nan")
    virtual = (s.size - 1) * (p / 100)
    if virtual >= s.size - 1:  # at or past the last value: numpy interpolates it with itself
        lo = hi = -1
    else:
        lo = int(np.floor(virtual))
        hi = lo + 1
    t = virtual - lo
    a, b = float(s[lo]), float(s[hi])
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t
