"""Bootstrap confidence intervals for comparing two runs' per-step distributions.

Pure functions over arrays of per-step values; the resampling is seeded, so the same two runs
always give the same interval.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

RESAMPLES = 2000
LEVEL = 0.90  # two-sided: the 5th and 95th percentiles
SEED = 0


def _resample(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``RESAMPLES`` bootstrap resamples of ``x``, one per row."""
    idx = rng.integers(0, len(x), size=(RESAMPLES, len(x)))
    return x[idx]


def ratio_of_medians(
    baseline: Sequence[float], candidate: Sequence[float]
) -> tuple[float, float, float]:
    """``(ratio, low, high)``: median(candidate) / median(baseline) and its bootstrap interval."""
    a, b = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    rng = np.random.default_rng(SEED)
    ra = np.median(_resample(a, rng), axis=1)
    rb = np.median(_resample(b, rng), axis=1)
    ratios = rb / np.maximum(ra, 1e-12)
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(np.median(b) / max(float(np.median(a)), 1e-12)), float(low), float(high)


def difference_of_means(
    baseline: Sequence[float], candidate: Sequence[float]
) -> tuple[float, float, float]:
    """``(difference, low, high)``: mean(candidate) − mean(baseline) and its bootstrap interval
    (for shares of the step: a difference in points)."""
    a, b = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    rng = np.random.default_rng(SEED)
    diffs = _resample(b, rng).mean(axis=1) - _resample(a, rng).mean(axis=1)
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(diffs, [tail, 100 - tail])
    return float(b.mean() - a.mean()), float(low), float(high)


def ratio_of_means(
    baseline: Sequence[float], candidate: Sequence[float]
) -> tuple[float, float, float]:
    """``(ratio, low, high)``: mean(candidate) / mean(baseline) and its bootstrap interval. For
    step times this is the ratio of throughputs (steps per second are steps / total time), which
    stalls concentrated in a few steps (a DataLoader's epoch start) move and a median does not."""
    a, b = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    rng = np.random.default_rng(SEED)
    ratios = _resample(b, rng).mean(axis=1) / np.maximum(_resample(a, rng).mean(axis=1), 1e-12)
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(b.mean() / max(float(a.mean()), 1e-12)), float(low), float(high)
