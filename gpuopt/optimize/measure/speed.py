"""Faster, slower, or not measurable: the gain of a candidate over the baseline from the step
times of their timed runs. Pure functions; the resampling is seeded, so the same runs always
give the same verdict.

**The statistic.** Each run's steps are split (:mod:`gpuopt.optimize.measure.step_series`): its
warm-up, detected from the series, is left out and shown apart, like the extreme steps, which the
statistic does not let decide. A run's level is the median of its settled steps; a side's
*level* the geometric mean of its runs' levels (each run weighs the same: when runs differ more
than steps do, this is what more runs make surer); the speedup is the baseline's level over the
candidate's (steps per second, candidate over baseline) — the point estimate the interval is
built around.

**The training's wall time** (``whole=True``, a fix whose saving falls at epoch starts: the
DataLoader's): a run's level is the mean of *every* step, the first one (the workers starting)
and the epoch boundaries (the workers starting again) included, no warm-up left out and no step
set apart: the run's training time from its first step to its last, per step, which is what a
user's clock shows of the training (a median of settled steps leaves the start-ups out and
overstates such a fix: 4.4-8.7x for one 1.0-1.7x faster timed outside). With two runs a side or
more its speedup and interval come from the **pairs of runs** (:func:`paired`): the baseline
and candidate runs alternate, so each baseline run over the candidate run timed next to it; the
geometric mean of those ratios, and Student's t interval (90%) of it. From five pairs on, a
single pair far beyond the others' spread (modified z-score over 3.5: a run stalled from its
start) is set apart and named (``set_apart_pair``); two or more such pairs all count. A
neighbour's load that comes and goes weighs on both runs of a pair and leaves their ratio, and
the pairs' own spread is in the interval: such a gain need only clear :data:`MIN_EFFECT` (not
the noise too), and is too noisy only when its interval is wider than ±:data:`NOISY` and not
clear of it.

**The interval.** A hierarchical bootstrap of each side
(:func:`~gpuopt.stats.bootstrap.hierarchical_levels`, 2,000 resamples): the runs drawn with
replacement, then each drawn run's settled steps with replacement, each drawn run's median
taken and their geometric mean; the ratio's interval is the 5th to 95th percentile of the
baseline's resampled levels over the candidate's. A side is *tight* when its own interval is
within ±:data:`~gpuopt.optimize.measure.policy.TIGHT` of its level.

**The noise** is the baseline's run-to-run spread: the standard deviation of its runs' levels
over their mean (with a single baseline run, unknown: 0) — what one run's level may be off by,
however many runs there are. **The verdict**: *faster* when the interval's low
end clears ``1 + max(noise, MIN_EFFECT)``; *slower* when the whole interval is below 1 and the
speedup below ``1 / (1 + max(noise, MIN_EFFECT))`` — a bound below 1 whatever the noise, so a fix
that measured slower is always found slower; otherwise *no measurable gain*. **Too noisy**: short
of slower, when a side's own interval is wider than ±:data:`NOISY` of its level there is no
speedup and no verdict (``speedup`` None, ``verdict`` "not-measured", the label "too noisy to
measure (baseline ±111%)"): such an interval is not a measurement, faster or not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuopt.model.optimize import PAIRED, SET_APART, TRAINING_TIME, WHOLE_STATISTIC, Gain
from gpuopt.optimize.measure.policy import TIGHT
from gpuopt.optimize.measure.step_series import SplitRun, split_run
from gpuopt.stats.bootstrap import LEVEL, hierarchical_levels, tail_percentiles
from gpuopt.stats.outliers import lone_outlier
from gpuopt.stats.t import t_quantile

MIN_EFFECT = 0.03  # a gain or a loss under 3% is never claimed, however quiet the runs
MIN_STEPS = 3  # settled steps a side needs, in all, to be measured at all
# a side whose 90% interval is wider than ±50% of its level: a 1.5x gain or none fit in it alike
NOISY = 0.5


@dataclass(frozen=True)
class Side:
    """One side's timed runs, split, with its level and the interval of that level."""

    runs: list[SplitRun]
    level: float  # the geometric mean of its runs' settled medians (seconds a step)
    low: float
    high: float
    levels: np.ndarray  # the bootstrap's resampled levels (for the ratio's interval)

    @property
    def half_width(self) -> float:
        """The interval's half width relative to the level (0.05: ±5%)."""
        return (self.high - self.low) / 2 / self.level if self.level > 0 else float("inf")

    @property
    def tight(self) -> bool:
        return self.half_width <= TIGHT

    @property
    def spread(self) -> float:
        """Run-to-run noise: the standard deviation of the runs' levels over their mean (0: one
        run). Not their range, which grows with the runs: more runs must make a gain surer."""
        levels = [r.level for r in self.runs if r.level]
        if len(levels) < 2:
            return 0.0
        return float(np.std(levels, ddof=1) / np.mean(levels))


def side(runs: Sequence[Sequence[float]], min_warmup: int = 0, whole: bool = False) -> Side | None:
    """A side from its runs' step times (seconds); None when it has fewer than
    :data:`MIN_STEPS` settled steps in all. ``whole``: each run's level is the mean of all its
    steps (the training's wall time per step), not the median of its settled ones."""
    split = [_whole_run(r) if whole else split_run(r, min_warmup) for r in runs if len(r) > 0]
    split = [s for s in split if s.settled]
    if sum(len(s.settled) for s in split) < MIN_STEPS:
        return None
    level = _geomean([s.level for s in split if s.level])
    levels = hierarchical_levels([s.settled for s in split], mean=whole)
    low, high = tail_percentiles(levels, LEVEL)
    return Side(split, level, low, high, levels)


def _whole_run(steps: Sequence[float]) -> SplitRun:
    """Every step counts: no warm-up, no step set apart; the level is their mean."""
    return SplitRun(0, list(steps), float(np.mean(steps)) if len(steps) else None)


def _geomean(values: Sequence[float]) -> float:
    return float(np.exp(np.mean(np.log(np.asarray(values, dtype=float)))))


@dataclass(frozen=True)
class Paired:
    """The gain the runs' pairs measure: (speedup, low, high), and the pair set apart, if one
    was (its 0-based index and its ratio)."""

    speedup: float
    low: float
    high: float
    apart: int | None = None
    apart_ratio: float | None = None


def paired(base: Side, cand: Side) -> Paired | None:
    """The training's time as the runs' pairs measure it: each baseline run over the candidate
    run timed next to it (they alternate, so a load that comes and goes weighs on both runs of
    a pair and leaves their ratio), and Student's t interval (90%) of those ratios' geometric
    mean; None with fewer than two pairs.

    From five pairs on, one pair whose log ratio is far beyond the others' spread (its modified
    z-score over 3.5, :func:`~gpuopt.stats.outliers.lone_outlier`) is set apart, and said: a run
    stalled from its start (a machine's oversubscribed threads) would otherwise set the mean and
    the interval's width alone. Two or more such pairs are a second mode: they all count."""
    logs = [
        float(np.log(b.level / c.level))
        for b, c in zip(base.runs, cand.runs, strict=False)
        if b.level and c.level
    ]
    if len(logs) < 2:
        return None
    apart = lone_outlier(logs)
    kept = [x for i, x in enumerate(logs) if i != apart]
    mean = float(np.mean(kept))
    half = t_quantile((1 + LEVEL) / 2, len(kept) - 1) * float(np.std(kept, ddof=1))
    half /= float(np.sqrt(len(kept)))
    ratio = float(np.exp(logs[apart])) if apart is not None else None
    return Paired(
        float(np.exp(mean)), float(np.exp(mean - half)), float(np.exp(mean + half)), apart, ratio
    )


def compare(base: Side, cand: Side, whole: bool = False) -> Gain:
    """The candidate's gain over the baseline, with its interval, noise and verdict. On the
    training's time (``whole``) with two runs a side or more, the runs' pairs measure it
    (:func:`paired`): their interval holds the runs' spread, so a gain need only clear
    :data:`MIN_EFFECT`."""
    speedup = round(base.level / cand.level, 4)  # the label says what the document holds
    ratios = base.levels / np.maximum(cand.levels, 1e-12)
    low, high = tail_percentiles(ratios, LEVEL)
    noise = base.spread
    floor = max(noise, MIN_EFFECT)
    pairs = paired(base, cand) if whole else None
    if pairs is not None:
        speedup, low, high = round(pairs.speedup, 4), pairs.low, pairs.high
        floor = MIN_EFFECT
    out = Gain(
        speedup=speedup,
        low=round(low, 4),
        high=round(high, 4),
        noise=round(noise, 4),
    )
    out.baseline_level_s = round(base.level, 7)
    out.candidate_level_s = round(cand.level, 7)
    out.baseline_half_width = round(base.half_width, 4)
    out.candidate_half_width = round(cand.half_width, 4)
    out.runs = [len(base.runs), len(cand.runs)]
    if pairs is not None and pairs.apart is not None and pairs.apart_ratio is not None:
        out.set_apart_pair, out.set_apart_ratio = pairs.apart + 1, round(pairs.apart_ratio, 4)
    out.statistic = (
        WHOLE_STATISTIC
        + (PAIRED if pairs is not None else "")
        + (SET_APART if pairs is not None and pairs.apart is not None else "")
        if whole
        else (
            "each run's median settled step (warm-up detected per run, left out), geometric mean "
            "over the runs"
        )
    )
    covers = f" ({TRAINING_TIME})" if whole else ""
    noisy = [
        f"{name} ±{one.half_width:.0%}"
        for name, one in (("baseline", base), ("candidate", cand))
        if one.half_width > NOISY
    ]
    if pairs is not None:  # the pairs' interval, not each side's, is what the verdict reads:
        # one clear of 1 + MIN_EFFECT is a gain however wide (no gain does not fit in it)
        width = (high - low) / 2 / speedup
        noisy = [f"the runs' pairs ±{width:.0%}"] if width > NOISY and low <= 1 + floor else []
    if high < 1.0 and speedup < 1.0 / (1.0 + floor):
        out.verdict, out.measurable = "slower", True
        out.label = f"{1 / speedup:.2f}x slower" + covers
    elif noisy:
        out.speedup, out.low, out.high = None, None, None
        out.verdict = "not-measured"
        out.label = f"too noisy to measure ({', '.join(noisy)})"
    elif low > 1.0 + floor:
        out.verdict, out.measurable = "faster", True
        out.label = f"{speedup:.2f}x faster" + covers
    else:
        out.verdict = "no-gain"
        out.label = "no measurable gain"
    return out


def gain(
    baseline_runs: Sequence[Sequence[float]],
    candidate_runs: Sequence[Sequence[float]],
    skip: int = 0,
    whole: bool = False,
) -> Gain:
    """Candidate over baseline from per-step times (seconds) of each side's timed runs;
    ``skip``: steps left out at least at the start of every run, on both sides (a fix that
    compiles first is measured once it has); ``whole``: the training's wall time per step
    (every step of each run, its first included), not the settled steps' median."""
    base, cand = side(baseline_runs, skip, whole), side(candidate_runs, skip, whole)
    if base is None or cand is None:
        return Gain(
            speedup=None,
            label=f"not measured: fewer than {MIN_STEPS} settled steps",
            verdict="not-measured",
        )
    return compare(base, cand, whole)


def sides_tight(
    baseline_runs: Sequence[Sequence[float]],
    candidate_runs: Sequence[Sequence[float]],
    skip: int = 0,
) -> tuple[bool, bool]:
    """Whether each side's interval is within ±:data:`TIGHT` (a side not measured: not)."""
    base, cand = side(baseline_runs, skip), side(candidate_runs, skip)
    return (base is not None and base.tight, cand is not None and cand.tight)
