"""Interval arithmetic on sorted numpy arrays: union, total length, intersection, subtraction.

All functions take half-open intervals ``[start, end)`` as two float arrays and return disjoint,
sorted intervals. They are vectorised (sort + cumulative sums), so a trace with millions of
kernels costs milliseconds, and they are the one place the "time with at least one kernel
running" definitions are implemented.
"""

from __future__ import annotations

import numpy as np

from gpuopt.trace.columns import BoolArray, FloatArray, IntArray

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
    t, ca, cb = _open_counts(a, b)
    return _segments(t, (ca > 0) & (cb > 0))


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """Parts of ``a`` not covered by ``b`` (both disjoint)."""
    if a[0].size == 0:
        return empty()
    if b[0].size == 0:
        return a
    t, ca, cb = _open_counts(a, b)
    return _segments(t, (ca > 0) & (cb == 0))


def split(a: Intervals, b: Intervals) -> tuple[Intervals, Intervals]:
    """``(intersect(a, b), subtract(a, b))`` from one sweep (callers peeling ``a`` layer by layer
    need both)."""
    if a[0].size == 0 or b[0].size == 0:
        return intersect(a, b), subtract(a, b)
    t, ca, cb = _open_counts(a, b)
    return _segments(t, (ca > 0) & (cb > 0)), _segments(t, (ca > 0) & (cb == 0))


def _open_counts(a: Intervals, b: Intervals) -> tuple[FloatArray, IntArray, IntArray]:
    """Every endpoint of ``a`` and ``b`` in time order (stable: on ties a's starts, a's ends, b's
    starts, b's ends), and how many intervals of ``a`` and of ``b`` are open after each one."""
    na, nb = a[0].size, b[0].size
    times = np.concatenate([a[0], a[1], b[0], b[1]])
    order = np.argsort(times, kind="stable")
    delta = np.zeros(times.size, dtype=np.int8)  # +1 at a start, -1 at an end: of a, then of b
    delta[:na], delta[na : 2 * na] = 1, -1
    ca = np.cumsum(delta[order], dtype=np.int64)
    delta[: 2 * na] = 0
    delta[2 * na : 2 * na + nb], delta[2 * na + nb :] = 1, -1
    cb = np.cumsum(delta[order], dtype=np.int64)
    return times[order], ca, cb


def _segments(t: FloatArray, keep: BoolArray) -> Intervals:
    """Union of the elementary segments ``[t[i], t[i+1])`` whose counts (after endpoint i) pass
    ``keep``; empty segments (ties) are skipped, so only the counts after all endpoints at one time
    matter."""
    seg_keep = keep[:-1] & (t[1:] > t[:-1])
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
        k = s.searchsorted(x, side="right")  # intervals starting at or before x
        last = np.maximum(k - 1, 0)
        full = cum[last]
        last_s = s[last]
        last_e = e[last]
        partial = np.clip(np.minimum(x, last_e) - last_s, 0, None)
        return np.where(k > 0, full + partial, 0.0)

    return covered_before(win_ends) - covered_before(win_starts)
