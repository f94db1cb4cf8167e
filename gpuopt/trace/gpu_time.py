"""GPU time accounting: utilisation, temporal breakdown, kernel-type overlap, comm/compute overlap.

Definitions (HTA 0.5 / PyTorch profiler, written down in docs/trace-metrics.md):

* span = end of the last GPU event − start of the first (HTA's "kernel time");
* busy = union of all GPU events (kernels, copies, sets, syncs on a stream); idle = span − busy;
* compute = union of computation kernels; non-compute = busy − compute;
* utilisation = busy / span, per device and per stream (a stream's own span).
"""

from __future__ import annotations

import numpy as np

from gpuopt.model.trace import StreamUse, Temporal
from gpuopt.trace import intervals as iv
from gpuopt.trace.array_stats import unique
from gpuopt.trace.prepare import COMMUNICATION, COMPUTATION, KERNEL_TYPES, MEMORY, RankView


def gpu_intervals(v: RankView, mask: np.ndarray | None = None) -> iv.Intervals:
    m = v.on_stream if mask is None else (v.on_stream & mask)
    return iv.merge(v.ts[m], v.end[m])


def temporal_breakdown(v: RankView) -> Temporal | None:
    busy = gpu_intervals(v)
    if busy[0].size == 0:
        return None
    span = float(busy[1][-1] - busy[0][0])
    # the union lies inside the span and holds the compute union: exact on whole µs, and kept so
    # when float sums of far-from-zero timestamps round the other way
    busy_us = min(iv.length(busy), span)
    compute = min(iv.length(gpu_intervals(v, v.ktype == COMPUTATION)), busy_us)
    return Temporal.of(span, busy_us, compute)


def stream_utilization(v: RankView) -> list[StreamUse]:
    """Per stream: events, busy time, its own span, utilisation (busy/span)."""
    rows = []
    for s in unique(v.ev.stream[v.on_stream]):
        m = v.on_stream & (v.ev.stream == s)
        u = iv.merge(v.ts[m], v.end[m])
        span = float(u[1][-1] - u[0][0]) if u[0].size else 0.0
        busy = iv.length(u)
        rows.append(
            StreamUse(
                stream=int(s),
                events=int(m.sum()),
                busy_us=busy,
                span_us=span,
                utilization=busy / span if span > 0 else None,
            )
        )
    return rows


def kernel_type_time(v: RankView) -> dict[str, float]:
    """Time per kernel-type combination ("COMPUTATION overlapping COMMUNICATION", ...), as HTA."""
    kinds = (COMPUTATION, COMMUNICATION, MEMORY)
    times, deltas = [], []
    for bit, k in enumerate(kinds):
        u = gpu_intervals(v, v.ktype == k)
        times += [u[0], u[1]]
        deltas += [np.full(u[0].size, 1 << bit), np.full(u[1].size, -(1 << bit))]
    t = np.concatenate(times)
    if t.size == 0:
        return {}
    d = np.concatenate(deltas)
    o = np.argsort(t, kind="stable")
    t, d = t[o], d[o]
    running = np.cumsum(d)
    seg = t[1:] - t[:-1]
    out: dict[str, float] = {}
    for state in unique(running[:-1]):
        if state <= 0:
            continue
        label = " overlapping ".join(
            KERNEL_TYPES[k] for bit, k in enumerate(kinds) if state & (1 << bit)
        )
        out[label] = out.get(label, 0.0) + float(seg[running[:-1] == state].sum())
    return out


def communication_us(v: RankView) -> float:
    """Time with at least one communication kernel running (union)."""
    return iv.length(gpu_intervals(v, v.ktype == COMMUNICATION))


def comm_comp_overlap(v: RankView) -> float | None:
    """Share of communication time (union) during which computation also runs; None without comm."""
    comm = gpu_intervals(v, v.ktype == COMMUNICATION)
    total = iv.length(comm)
    if total <= 0:
        return None
    comp = gpu_intervals(v, v.ktype == COMPUTATION)
    return iv.length(iv.intersect(comm, comp)) / total
