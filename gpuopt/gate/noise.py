"""The gate's noise model: within-run variation and run-to-run drift, in one interval.

Each side of a comparison is one or more runs. A run gives one value of a metric (its median step
time, its mean data-wait share, its GPU utilization) and, where it measured one, the per-step (or
per-sample) values that value came from.

* **Within a run**: the value's bootstrap replicates (the run's steps resampled, 2,000 times,
  seeded: the same runs always give the same interval). A share of step time is the run's time
  in that part over its step time, so its steps' shares are weighted by their times (a resample's
  value is its steps' waits over their times: the value a report shows).
* **Between runs**: two runs of the same code on the same machine differ by more than their
  steps' spread says (a neighbour's load, the CPU's clocks, where memory landed). That drift is a
  normal term added to every run's replicates. Its size is the larger of a floor (a setting:
  ``--step-time-noise``, ``--share-noise``) and what the runs themselves show: with three runs
  or more in all, the pooled spread of the runs' values around their side's mean, less the part
  the within-run variation already explains.

The interval of the difference (or of the ratio, for values compared on a log scale) is the
5th to 95th percentile of the candidate side's mean minus the baseline side's mean over the
replicates. A side's mean weighs each of its runs equally.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuopt.stats.bootstrap import LEVEL, RESAMPLES, SEED, resample, tail_percentiles
from gpuopt.stats.quantiles import median_last_axis


@dataclass(frozen=True)
class RunValues:
    """One run's values of one metric: ``units`` are its steps (or samples), or empty when the
    run measured the metric once (then it has no within-run variation to resample)."""

    units: tuple[float, ...] = ()
    value: float | None = None  # the run's own value when there are no units
    # each unit's weight in a mean (a step's time, for a share of step time); equal when empty
    weights: tuple[float, ...] = ()

    def mean(self) -> float | None:
        """The units' (weighted) mean, else ``value``."""
        if not self.units:
            return self.value
        w = self.weights or (1.0,) * len(self.units)
        total = sum(w)
        if total <= 0:
            return statistics.fmean(self.units)
        return sum(u * x for u, x in zip(self.units, w, strict=True)) / total


@dataclass(frozen=True)
class Interval:
    """A comparison with its interval. ``estimate``, ``low`` and ``high`` are a ratio (log-scale
    metrics: 1.05 is 5% more) or a difference (a share: 0.02 is 2 points more)."""

    estimate: float
    low: float
    high: float
    level: float
    ratio: bool
    runs: tuple[int, int]  # baseline runs, candidate runs
    units: tuple[int, int]  # steps (or samples) resampled on each side, 0 where none
    drift: float  # the run-to-run standard deviation used (log units, or points as a fraction)
    drift_source: str  # "floor" or "runs"

    def text(self) -> str:
        """A comparison's interval (:func:`compare_runs`) as the reports write it: ``90% interval
        +1.2% … +4.0%`` (a ratio) or ``90% interval -0.4 … +2.1pt`` (a difference of shares)."""
        if self.ratio:
            return f"{self.level:.0%} interval {self.low - 1:+.1%} … {self.high - 1:+.1%}"
        return f"{self.level:.0%} interval {self.low * 100:+.1f} … {self.high * 100:+.1f}pt"

    def covers(self) -> str:
        """What variation the interval includes, in words."""
        a, b = self.runs
        within = (
            f"within-run variation ({self.units[0]} + {self.units[1]} steps resampled)"
            if self.units[0] and self.units[1]
            else "no within-run variation (one value per run)"
        )
        size = f"{self.drift:.1%}" if self.ratio else f"{self.drift * 100:.1f}pt"
        runs = f"{a} + {b} runs" if a else f"{b} runs"
        if self.drift_source == "runs":
            drift = f"run-to-run drift {size}, estimated from the spread of {runs}"
        elif a + b < 3:
            drift = f"run-to-run drift {size} (the floor; {runs}: too few to estimate it)"
        else:
            drift = f"run-to-run drift {size} (the floor: the {runs}' own spread is smaller)"
        return f"{within} and {drift}"


def _statistic(x: np.ndarray, median: bool, log: bool, w: np.ndarray | None = None) -> np.ndarray:
    """The statistic over the last axis (a mean weighted by ``w`` where given)."""
    if median:
        s = median_last_axis(x)
    elif w is not None:
        s = np.asarray(np.sum(x * w, axis=-1) / np.maximum(np.sum(w, axis=-1), 1e-300))
    else:
        s = np.asarray(np.mean(x, axis=-1))
    return np.log(np.maximum(s, 1e-12)) if log else s


def _run_replicates(
    run: RunValues, median: bool, log: bool, rng: np.random.Generator
) -> tuple[float, np.ndarray]:
    """``(value, replicates)`` of one run's statistic (replicates all equal without units)."""
    if run.units:
        x = np.asarray(run.units, dtype=float)
        w = np.asarray(run.weights, dtype=float) if run.weights and not median else None
        value = float(_statistic(x, median, log, w))
        idx = resample(len(x), rng)
        return value, _statistic(x[idx], median, log, None if w is None else w[idx])
    if run.value is None:
        raise ValueError("a run without units needs a value")
    value = float(_statistic(np.asarray([run.value], dtype=float), median, log))
    return value, np.full(RESAMPLES, value)


def _drift(values: list[list[float]], within: list[float], floor: float) -> tuple[float, str]:
    """The run-to-run standard deviation: the floor, or the runs' own pooled spread (less the
    within-run part) where that is larger and there are three runs or more."""
    df = sum(len(v) for v in values) - len(values)
    if df < 1:
        return floor, "floor"
    ss = sum(float(np.sum((np.asarray(v) - np.mean(v)) ** 2)) for v in values)
    between = max(ss / df - float(np.mean(within)), 0.0) ** 0.5
    return (between, "runs") if between > floor else (floor, "floor")


def _side_means(
    side: list[tuple[float, np.ndarray]], drift: float, rng: np.random.Generator
) -> np.ndarray:
    """Each replicate's mean over the side's runs, every run shifted by its own drift draw."""
    reps = np.stack([r for _, r in side])  # runs × resamples
    if drift > 0:
        reps = reps + rng.normal(0.0, drift, size=reps.shape)
    return np.asarray(reps.mean(axis=0))


def _interval(estimate: float, diffs: np.ndarray, log: bool) -> tuple[float, float, float]:
    low, high = tail_percentiles(diffs, LEVEL, numpy_lerp=False)
    if log:
        return float(np.exp(estimate)), float(np.exp(low)), float(np.exp(high))
    return estimate, low, high


def compare_runs(
    baseline: Sequence[RunValues],
    candidate: Sequence[RunValues],
    *,
    median: bool,
    log: bool,
    floor: float,
) -> Interval:
    """The candidate side against the baseline side: a ratio of ``median``s (or means) when
    ``log``, else a difference of them, with its interval (see the module's docstring).
    ``floor``: the least run-to-run standard deviation (log units ≈ a fraction, or points as a
    fraction)."""
    rng = np.random.default_rng(SEED)
    sides = [[_run_replicates(r, median, log, rng) for r in runs] for runs in (baseline, candidate)]
    values = [[v for v, _ in side] for side in sides]
    within = [float(np.var(reps)) for side in sides for _, reps in side]
    drift, source = _drift(values, within, floor)
    diffs = _side_means(sides[1], drift, rng) - _side_means(sides[0], drift, rng)
    estimate = float(np.mean(values[1]) - np.mean(values[0]))
    estimate, low, high = _interval(estimate, diffs, log)
    return Interval(
        estimate=estimate,
        low=low,
        high=high,
        level=LEVEL,
        ratio=log,
        runs=(len(baseline), len(candidate)),
        units=(sum(len(r.units) for r in baseline), sum(len(r.units) for r in candidate)),
        drift=drift,
        drift_source=source,
    )


def one_side(runs: Sequence[RunValues], *, floor: float) -> Interval:
    """One side's mean with its interval (for an absolute bound such as ``--min-gpu-util``):
    within-run variation and run-to-run drift as in :func:`compare_runs`."""
    rng = np.random.default_rng(SEED)
    side = [_run_replicates(r, False, False, rng) for r in runs]
    values = [v for v, _ in side]
    drift, source = _drift([values], [float(np.var(r)) for _, r in side], floor)
    means = _side_means(side, drift, rng)
    estimate, low, high = _interval(float(np.mean(values)), means, False)
    return Interval(
        estimate=estimate,
        low=low,
        high=high,
        level=LEVEL,
        ratio=False,
        runs=(0, len(runs)),
        units=(0, sum(len(r.units) for r in runs)),
        drift=drift,
        drift_source=source,
    )
