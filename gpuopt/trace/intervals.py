"""Interval arithmetic on sorted numpy arrays: union, total length, intersection, subtraction.

All functions take half-open intervals ``[start, end)`` as two float arrays and return disjoint,
sorted intervals. They are vectorised (sort + cumulative sums), so a trace with millions of
kernels costs milliseconds, and they are the one place the "time with at least one kernel
running" definitions are implemented.
"""

from __future__ import annotations

import numpy as np

from gpuopt.trace.columns import FloatArray

Intervals = tuple[FloatArray, FloatArray]


def empty() -> Intervals:
    return np.zeros(0), np.zeros(0)


def merge(starts: FloatArray, ends: FloatArray) -> Intervals:
    """Union of intervals (touching ones are joined), sorted by start."""
    if starts.size == 0:
        return empty()
    order = np.argsort(starts, kind="stable")
    s = starts[order]
    e = ends[order]
    run_end = np.maximum.accumulate(e)
    # a new group starts where the start is past every earlier end (HTA: ts > cummax(prev end))
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    group_starts = np.flatnonzero(new)
    group_ends = np.append(group_starts[1:], s.size) - 1
    return s[group_starts], run_end[group_ends]


def length(iv: Intervals) -> float:
    return float(np.sum(iv[1] - iv[0])) if iv[0].size else 0.0


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Intervals covered by both ``a`` and ``b`` (each must already be disjoint, e.g. merged)."""
    if a[0].size == 0 or b[0].size == 0:
        return empty()
    return _sweep(a, b, lambda ca, cb: (ca > 0) & (cb > 0))


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """Parts of ``a`` not covered by ``b`` (both disjoint)."""
    if a[0].size == 0:
        return empty()
    if b[0].size == 0:
        return a
    return _sweep(a, b, lambda ca, cb: (ca > 0) & (cb == 0))


def _sweep(a: Intervals, b: Intervals, keep) -> Intervals:  # type: ignore[no-untyped-def]
    times = np.concatenate([a[0], a[1], b[0], b[1]])
    da = np.concatenate([np.ones(a[0].size), -np.ones(a[1].size), np.zeros(2 * b[0].size)])
    db = np.concatenate([np.zeros(2 * a[0].size), np.ones(b[0].size), -np.ones(b[1].size)])
    order = np.argsort(times, kind="stable")
    t = times[order]
    ca = np.cumsum(da[order])
    cb = np.cumsum(db[order])
    # segment i is [t[i], t[i+1]) with the counts after processing event i
    seg_keep = keep(ca[:-1], cb[:-1]) & (t[1:] > t[:-1])
    s = t[:-1][seg_keep]
    e = t[1:][seg_keep]
    return merge(s, e) if s.size else empty()


def clip(iv: Intervals, lo: float, hi: float) -> Intervals:
    """Restrict intervals to ``[lo, hi)``."""
    s = np.maximum(iv[0], lo)
    e = np.minimum(iv[1], hi)
    keep = e > s
    return s[keep], e[keep]


def covered_in_windows(iv: Intervals, win_starts: FloatArray, win_ends: FloatArray) -> FloatArray:
    """Length of ``iv`` (disjoint, sorted) inside each window (windows may be in any order)."""
    if iv[0].size == 0 or win_starts.size == 0:
        return np.zeros(win_starts.size)
    s, e = iv
    cum = np.concatenate([[0.0], np.cumsum(e - s)])

    def covered_before(x: FloatArray) -> FloatArray:
        # total covered length in (-inf, x)
        k = np.searchsorted(s, x, side="right")  # intervals starting at or before x
        full = cum[np.maximum(k - 1, 0)]
        last_s = s[np.maximum(k - 1, 0)]
        last_e = e[np.maximum(k - 1, 0)]
        partial = np.clip(np.minimum(x, last_e) - last_s, 0, None)
        return np.where(k > 0, full + partial, 0.0)

    return covered_before(win_ends) - covered_before(win_starts)
