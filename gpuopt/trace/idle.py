"""Idle time between work on each stream, split as HTA does: host wait, kernel wait, other.

For consecutive GPU events on one stream (by start time) the gap before an event is:

* **host wait** when its launch call on the CPU started after the previous event ended: the
  queue was empty, the GPU waited for the host;
* **kernel wait** when the gap is shorter than ``kernel_wait_us`` (30 µs, HTA's default): the
  normal delay between back-to-back kernels;
* **other** for the rest (e.g. waiting on another stream or an event).

Each gap is measured from the end of all the work queued before on the stream, so an event that
starts before that (an overlap, which a stream cannot run) has a zero gap, counted as kernel
wait. HTA measures from the previous event's end alone and counts a negative gap; the sums agree
but for the overlaps, which HTA subtracts (docs/trace-metrics.md).
"""

from __future__ import annotations

import numpy as np

from gpuopt.model.trace import GapCounts, IdleTotals, StreamIdle
from gpuopt.trace.columns import QUEUED_CATS
from gpuopt.trace.prepare import RankView, queued_by_stream

KERNEL_WAIT_US = 30.0
CATEGORIES = ("host_wait", "kernel_wait", "other")


def queued_mask(v: RankView) -> np.ndarray:
    return v.on_stream & v.ev.has_cat(QUEUED_CATS)


def idle_by_stream(v: RankView, kernel_wait_us: float = KERNEL_WAIT_US) -> list[StreamIdle]:
    """Per stream: idle µs before its queued events by category, and how many gaps of each."""
    rows: list[StreamIdle] = []
    for s, idx in queued_by_stream(v):
        if idx.size < 2:
            rows.append(StreamIdle(stream=s))
            continue
        ts, end = v.ts[idx], v.end[idx]
        prev_end = np.maximum.accumulate(end)[:-1]  # all the work queued before has ended
        gap = np.maximum(ts[1:] - prev_end, 0.0)
        rt = v.runtime_index[idx[1:]]
        rt_ts = np.where(rt >= 0, v.ts[np.maximum(rt, 0)], -np.inf)
        host = rt_ts > prev_end
        kern = ~host & (gap < kernel_wait_us)
        other = ~host & ~kern
        rows.append(
            StreamIdle(
                stream=s,
                host_wait=float(gap[host].sum()),
                kernel_wait=float(gap[kern].sum()),
                other=float(gap[other].sum()),
                gaps=GapCounts(
                    host_wait=int(host.sum()),
                    kernel_wait=int(kern.sum()),
                    other=int(other.sum()),
                ),
            )
        )
    return rows


def idle_totals(rows: list[StreamIdle]) -> IdleTotals:
    """The streams' idle time summed, by category."""
    return IdleTotals(
        host_wait=float(sum(r.host_wait for r in rows)),
        kernel_wait=float(sum(r.kernel_wait for r in rows)),
        other=float(sum(r.other for r in rows)),
    )
