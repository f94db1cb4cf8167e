"""Step statistics and the time breakdown: pure functions from measurements to Profile parts."""

from __future__ import annotations

import statistics

from gpuopt.model.profile import Breakdown, StepRecord, StepTimes
from gpuopt.stats.quantiles import quantile_sorted


def step_times(start: float, ends: list[float]) -> list[float]:
    """Durations of each step from its end times; step 0 starts at ``start``."""
    out: list[float] = []
    prev = start
    for e in ends:
        out.append(max(0.0, e - prev))
        prev = e
    return out


def time_stats(xs: list[float]) -> StepTimes:
    if not xs:
        return StepTimes()
    s = sorted(xs)
    return StepTimes(
        median=statistics.median(s),
        p10=quantile_sorted(s, 0.10),
        p90=quantile_sorted(s, 0.90),
        mean=statistics.fmean(s),
    )


def measured_indices(count: int, warmup: int) -> list[int]:
    """Steps that count for the statistics: all after warm-up; all of them when there are fewer
    steps than warm-up + 1 (so a short run still says something, and says it is short)."""
    if count == 0:
        return []
    if count <= warmup:
        return list(range(count))
    return list(range(warmup, count))


def breakdown(
    times: list[float],
    data_wait: list[float],
    h2d: list[float] | None = None,
    sync: list[float] | None = None,
    other_share: float | None = None,
    collective: list[float] | None = None,
) -> Breakdown:
    """Fractions of measured step time: data_wait, h2d, sync, compute, other (sum to 1), and
    ``collective`` when ``collective`` is given (one rank of several).

    ``data_wait``, ``h2d``, ``sync`` and ``collective`` are measured seconds per step.
    ``other_share`` is the measured share of the remaining (non-waiting) time spent *between* ops
    — host overhead — when the recorder measured it; without it, all remaining time is counted
    as compute.
    """
    total = sum(times)
    if total <= 0:
        return Breakdown() if collective is None else Breakdown(collective=0.0)
    dw = min(sum(data_wait), total) / total
    hd = min(sum(h2d or []), total) / total
    sy = min(sum(sync or []), total) / total
    co = min(sum(collective or []), total) / total
    waiting = dw + hd + sy + co
    if waiting > 1.0:  # overlapping measurements: scale so the parts still sum to 1
        dw, hd, sy, co = dw / waiting, hd / waiting, sy / waiting, co / waiting
        waiting = 1.0
    rest = 1.0 - waiting
    other = rest * min(max(other_share or 0.0, 0.0), 1.0)
    out = Breakdown(data_wait=dw, h2d=hd, sync=sy, compute=rest - other, other=other)
    if collective is not None:
        out.collective = co
    return out


def series(
    start: float, t0: float, ends: list[float], warmup: int, data_wait: dict[int, float]
) -> list[StepRecord]:
    """One record per step for plots: start offset, duration, measured data wait."""
    out = []
    prev = start
    for i, e in enumerate(ends):
        out.append(
            StepRecord(
                index=i,
                start_s=round(prev - t0, 6),
                time_s=max(0.0, e - prev),
                warmup=i < warmup,
                data_wait_s=data_wait.get(i, 0.0),
            )
        )
        prev = e
    return out
