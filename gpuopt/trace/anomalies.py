"""Events no profiler can have recorded: repaired once, where the columns are built, and said.

Why here and not in each analysis: every analysis assumes events that could have happened (a
duration is not negative, a launch is recorded once). Repairing the columns once, before any
analysis runs, keeps them simple and makes every number of the profile follow from the same
events; each repair leaves a one-line note, which becomes a warning of the profile (prefixed with
the rank). What is repaired, and what is refused instead, is in docs/trace-metrics.md ("Damaged
traces"). Three checks need more than one file's columns and run later: overlaps on one stream
need the rounded times (:func:`stream_overlaps`, on the rank's view), clock skew needs every rank
(:func:`clock_skew`).
"""

from __future__ import annotations

import numpy as np

from gpuopt.trace.columns import QUEUED_CATS, BoolArray, EventColumns, FloatArray

# Beyond 2**53 µs (the year 2255 for a Unix-epoch clock) a float64 no longer holds every whole
# µs: such a timestamp or duration is not a measurement.
TIME_LIMIT_US = float(1 << 53)
# More than 256 TiB in one copy is not a copy: the byte count is read as unknown.
BYTES_LIMIT = 1 << 48


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def repair_events(cols: EventColumns) -> EventColumns:
    """``cols`` without the events that cannot be measurements, each kind of repair noted in
    ``cols.repairs`` (the events it counts, what was done)."""
    notes: list[str] = []
    bad_time = ~(np.abs(cols.ts) < TIME_LIMIT_US) | ~(cols.dur < TIME_LIMIT_US)  # NaN included
    negative = ~bad_time & (cols.dur < 0)
    keep = ~(bad_time | negative)
    if bad_time.any():
        notes.append(
            f"dropped {_plural(int(bad_time.sum()), 'event')} without a usable time "
            f"('ts' missing, or 'ts'/'dur' beyond {TIME_LIMIT_US:.3g} µs)"
        )
    if negative.any():
        notes.append(
            f"dropped {_plural(int(negative.sum()), 'event')} with a negative duration ('dur' < 0)"
        )
    dup = duplicates(cols, keep)
    if dup.any():
        keep &= ~dup
        notes.append(
            f"dropped {_plural(int(dup.sum()), 'duplicate event')} (a launch or GPU event "
            "recorded more than once: same correlation id, stream or thread, time and name)"
        )
    if not keep.all():
        cols = cols.take(keep)
    huge = cols.bytes >= BYTES_LIMIT
    if huge.any():
        cols.bytes = np.where(huge, -1, cols.bytes)
        notes.append(
            f"{_plural(int(huge.sum()), 'event')} with an impossible byte count "
            f"(2^48 bytes or more) read as unknown"
        )
    strayed = int((cols.has_cat(QUEUED_CATS) & (cols.stream == -1)).sum())
    if strayed:
        notes.append(
            f"{_plural(strayed, 'kernel/copy event')} without a stream id (a trimmed trace?): "
            "not counted as GPU work"
        )
    cols.repairs = [*cols.repairs, *notes]
    return cols


def duplicates(cols: EventColumns, among: BoolArray) -> BoolArray:
    """Per event: is it an exact copy of an earlier event (in file order) of ``among``?

    Only events with a correlation id or a stream can be told apart from legitimate repeats: a
    correlation id names one runtime call and its GPU work, and a stream runs one thing at a
    time. Other CPU events are left alone: an op nested in an op of the same name (``aten::zeros``
    in ``aten::zeros``) starts and ends in the same µs and looks exactly alike in every field
    gpuopt reads. Cheap on a real trace: one sort by (correlation, start); only events sharing
    both with another are compared field by field.
    """
    out = np.zeros(len(cols), dtype=bool)
    sub = np.flatnonzero(among & ((cols.correlation != -1) | (cols.stream != -1)))
    if sub.size < 2:
        return out
    o = sub[np.lexsort((cols.ts[sub], cols.correlation[sub]))]
    same = (cols.correlation[o[1:]] == cols.correlation[o[:-1]]) & (
        cols.ts[o[1:]] == cols.ts[o[:-1]]
    )
    if not same.any():
        return out
    tied = np.zeros(o.size, dtype=bool)
    tied[1:] = same
    tied[:-1] |= same
    cand = o[tied]
    fields = (
        cols.order,  # last key of lexsort's first: ties in every other field keep file order
        cols.stack,
        cols.bytes,
        cols.cat,
        cols.name,
        cols.thread,
        cols.stream,
        cols.dur,
        cols.ts,
        cols.correlation,
    )
    c = cand[np.lexsort(tuple(f[cand] for f in fields))]
    equal = np.ones(c.size - 1, dtype=bool)
    for f in fields[1:]:
        equal &= f[c[1:]] == f[c[:-1]]
    out[c[1:][equal]] = True
    return out


def stream_overlaps(streams: list[tuple[FloatArray, FloatArray]]) -> int:
    """How many events start before the work queued before them on their stream has ended
    (``streams``: each stream's events as (starts, ends)). A stream runs its work in order, so
    these are clock or recording errors. Events sharing a start are ordered shortest first: a
    zero-length event at the start of a kernel is not an overlap."""
    n = 0
    for ts, end in streams:
        if ts.size > 1:
            o = np.lexsort((end, ts))
            n += int((ts[o][1:] < np.maximum.accumulate(end[o])[:-1]).sum())
    return n


def clock_skew(ranges: dict[int, tuple[float, float]]) -> tuple[list[int], float] | None:
    """Ranks whose time range (first to last event, µs) overlaps no other rank's, and the
    smallest distance between such a rank's range and another's (µs); None if every rank
    overlaps another. Ranks of one job run at the same time, so a rank apart from all the others
    has a clock offset from theirs (or comes from another run)."""
    if len(ranges) < 2:
        return None
    apart: list[int] = []
    gap = float("inf")
    for r, (lo, hi) in ranges.items():
        dist = [max(lo - hi2, lo2 - hi, 0.0) for r2, (lo2, hi2) in ranges.items() if r2 != r]
        if min(dist) > 0:
            apart.append(r)
            gap = min(gap, min(dist))
    return (sorted(apart), gap) if apart else None
