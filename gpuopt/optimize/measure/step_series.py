"""One run's step times, split: the warm-up before the run settles, the settled steps, and the
extreme steps among them. Pure functions over a list of seconds.

**Warm-up** is read from the series itself, not assumed: the settled *level* is the median of the
run's second half, its *band* that level ± the larger of 3 robust standard deviations (1.4826 ×
the median absolute deviation) and 10% of the level; the warm-up ends at the first step in the
band from which the next :data:`WINDOW` steps lie in the band about as often as the second
half's steps do. First-epoch effects, allocator growth,
cudnn's autotuning, a CUDA-graph capture or a compile step lie above it; a DataLoader's prefetch
buffer draining (first steps faster than the loader's rate) below it — both are warm-up. A series
that reaches the band only in its second half has not settled: its warm-up is capped at half the
run and the split says so (``settled=False``).

**Extreme steps** are settled steps above the level by more than the larger of 5 robust standard
deviations and 50% of the level (a garbage collection, a neighbour's burst, a checkpoint): the
statistic (a median) does not let them decide, and they are reported apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import median

WINDOW = 5  # the steps after a candidate end of the warm-up that must look settled
SLACK = 0.25  # ... as often in the band as the second half's steps, less this share
BAND_SD = 3.0  # the band: level ± max(BAND_SD robust sd, BAND_SHARE of the level)
BAND_SHARE = 0.10
EXTREME_SD = 5.0  # an extreme step: above level + max(EXTREME_SD robust sd, EXTREME_SHARE level)
EXTREME_SHARE = 0.50
MAD_SD = 1.4826  # a normal distribution's sd over its median absolute deviation


@dataclass(frozen=True)
class SplitRun:
    """A run's steps (seconds) split into warm-up and settled steps."""

    warmup: int  # leading steps before the run settled
    settled: list[float]  # the steps after the warm-up (the extreme ones included)
    level: float | None  # the median of the settled steps (None: no step)
    extreme: list[int] = field(default_factory=list)  # indices (in the series) of extreme steps
    did_settle: bool = True  # False: the warm-up was capped at half the run
    warmup_s: float = 0.0  # seconds the warm-up steps took (shown apart)


def robust_sd(values: Sequence[float]) -> float:
    """1.4826 × the median absolute deviation (a normal distribution's standard deviation)."""
    if not values:
        return 0.0
    m = median(values)
    return MAD_SD * median(abs(v - m) for v in values)


def split_run(steps: Sequence[float], min_warmup: int = 0) -> SplitRun:
    """``steps`` (seconds, in order) split at the end of their warm-up; ``min_warmup``: steps
    left out at least (a fix that compiles first says how many)."""
    n = len(steps)
    if n == 0:
        return SplitRun(0, [], None)
    tail = list(steps[n // 2 :])
    level = median(tail)
    width = max(BAND_SD * robust_sd(tail), BAND_SHARE * level)
    warmup, did_settle = _settled_from(steps, level, width), True
    if warmup is None or warmup > n // 2:
        warmup, did_settle = n // 2, False
    warmup = min(max(warmup, min_warmup), max(n - 1, 0))
    settled = list(steps[warmup:])
    level = median(settled)
    fence = level + max(EXTREME_SD * robust_sd(settled), EXTREME_SHARE * level)
    extreme = [warmup + i for i, t in enumerate(settled) if t > fence]
    return SplitRun(warmup, settled, level, extreme, did_settle, float(sum(steps[:warmup])))


def _settled_from(steps: Sequence[float], level: float, width: float) -> int | None:
    """The first step in ``level ± width`` from which the next :data:`WINDOW` steps lie in the
    band as often as the second half's do, less :data:`SLACK` (a run with no outlier: 4 of 5; a
    run whose steps a busy machine preempts one time in three: 2 of 5 — there, demanding
    consecutive steps in the band would find no end to the warm-up)."""
    n = len(steps)
    inside = [abs(t - level) <= width for t in steps]
    share = sum(inside[n // 2 :]) / max(n - n // 2, 1)
    for i in range(n):
        window = inside[i : i + WINDOW]
        if inside[i] and sum(window) / len(window) >= share - SLACK:
            return i
    return None
