"""A GPU that runs behind the host: each step's GPU work measured by what the step launched.

A training loop that queues work faster than the GPU runs it leaves the GPU a step or more
behind: the work a ``ProfilerStep#N`` launched starts only after that host step has ended (the
GPU is still running earlier steps' work, some of it queued before the trace began). Windows
that start at the host step then hold the backlog: in a DDP ResNet trace (MI300) the first
measured step was 49.06 ms for a 16.80 ms host step and the next began 32.2 ms after its own.

Here a GPU is *behind* when two or more steps are measured, every one launched GPU work, and
that work started at or after its host step's end. Its steps are then measured on the GPU by the
work each launched (joined by correlation id, launch → GPU event): a step runs from its first GPU
work to the next step's first GPU work (the last one to the end of its own work); their median is
the GPU's steady cadence, which the host, running ahead, can only keep up with by waiting.
"""

from __future__ import annotations

import numpy as np

from gpuopt.model.trace import GpuLag
from gpuopt.stats.quantiles import median
from gpuopt.trace.columns import FloatArray
from gpuopt.trace.prepare import RankView


def launched_spans(v: RankView) -> tuple[FloatArray, FloatArray]:
    """Per profiler step (``v.steps``): the first start and the last end of the GPU work
    launched during its host annotation (inf and -inf for a step that launched none)."""
    if "launched_spans" not in v.memo:
        starts = np.array([s.start for s in v.steps])
        ends = np.array([s.end for s in v.steps])
        first = np.full(starts.size, np.inf)
        last = np.full(starts.size, -np.inf)
        g = np.flatnonzero(v.on_stream & (v.runtime_index >= 0))
        if starts.size and g.size:
            launch_ts = v.ts[v.runtime_index[g]]
            k = np.searchsorted(starts, launch_ts, side="right") - 1
            ok = (k >= 0) & (launch_ts < ends[np.maximum(k, 0)])
            np.minimum.at(first, k[ok], v.ts[g][ok])
            np.maximum.at(last, k[ok], v.end[g][ok])
        v.memo["launched_spans"] = (first, last)
    return v.memo["launched_spans"]  # type: ignore[no-any-return]


def gpu_windows(v: RankView) -> tuple[FloatArray, FloatArray] | None:
    """The steps' windows on the GPU where it runs behind the host (see the module), else None:
    from each step's first GPU work to the next one's, the last to the end of its own work."""
    first, last = launched_spans(v)
    if first.size < 2 or not np.isfinite(first).all():
        return None  # a cadence needs two steps (one step's work may just start after it ends)
    host_end = np.array([s.end for s in v.steps])
    if (first < host_end).any() or (np.diff(first) < 0).any():
        return None
    ws = first.copy()
    we = np.append(first[1:], max(float(last[-1]), float(first[-1])))
    return ws, we


def gpu_lag(v: RankView) -> GpuLag | None:
    """How far behind the host the GPU runs (None where it does not: :func:`gpu_windows`)."""
    windows = gpu_windows(v)
    if windows is None:
        return None
    ws, we = windows
    lag = ws - np.array([s.start for s in v.steps])
    return GpuLag(
        steps=int(ws.size),
        lag_min_us=float(lag.min()),
        lag_max_us=float(lag.max()),
        queued_before=int(np.searchsorted(v.unlaunched_ts, ws[0], side="left")),
        gpu_step_us=median(we - ws),
        host_step_us=median(np.array([s.end - s.start for s in v.steps])),
    )


def lag_warning(lag: GpuLag) -> str:
    """The one-line warning of a rank whose GPU runs behind the host (the rank not named)."""
    lo, hi = lag.lag_min_us / 1e3, lag.lag_max_us / 1e3
    spread = f"{lo:.1f} ms" if round(lo, 1) == round(hi, 1) else f"{lo:.1f}-{hi:.1f} ms"
    queued = (
        f"; {lag.queued_before} GPU events were queued before the trace began"
        if lag.queued_before
        else ""
    )
    return (
        f"the GPU runs behind the host: each step's GPU work started {spread} after its host "
        f"step began{queued}; steps are measured by the GPU work each one launched: "
        f"{lag.gpu_step_us / 1e3:.2f} ms a step on the GPU (median), "
        f"{lag.host_step_us / 1e3:.2f} ms on the host"
    )
