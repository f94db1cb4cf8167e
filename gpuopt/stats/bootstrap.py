"""The bootstrap's settings and draws, shared by the gate's and optimize's intervals.

Every interval is drawn from :data:`RESAMPLES` resamples by a generator seeded with :data:`SEED`,
so the same runs always give the same interval; its ends are the percentiles at the two tails of
:data:`LEVEL`. Each caller keeps its own model (what a run's value is, how runs combine, the
run-to-run drift) and its own order of draws from the generator: these are the primitives only.

numpy is imported inside the functions, so the constants cost nothing to import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpuopt.stats.quantiles import percentiles, quantile_sorted

if TYPE_CHECKING:
    import numpy as np

RESAMPLES = 2000
LEVEL = 0.90  # two-sided: the 5th and 95th percentiles
SEED = 0


def tails(level: float = LEVEL) -> tuple[float, float]:
    """The percentiles (0-100) at the ends of a two-sided ``level`` interval: 5 and 95 at 0.90."""
    tail = (1 - level) / 2 * 100
    return tail, 100 - tail


def tail_percentiles(
    reps: np.ndarray, level: float = LEVEL, *, numpy_lerp: bool = True
) -> tuple[float, float]:
    """The ends of the two-sided ``level`` interval of the replicates ``reps`` (1-d): numpy's
    percentiles to the bit (``np.percentile``), or with ``numpy_lerp=False`` the plain
    ``a + (b - a) * t`` interpolation (:func:`~gpuopt.stats.quantiles.quantile_sorted`), which
    differs from numpy's in the last bit where ``t >= 0.5``: the gate's intervals are drawn so."""
    low, high = tails(level)
    if numpy_lerp:
        a, b = percentiles(reps, (low, high))
        return a, b
    import numpy as np

    s: list[float] = np.sort(reps).tolist()
    return quantile_sorted(s, low / 100), quantile_sorted(s, high / 100)


def resample(n: int, rng: np.random.Generator) -> np.ndarray:
    """:data:`RESAMPLES` bootstrap resamples of ``n`` values as indices, one resample a row (one
    ``rng.integers`` call): index a run's values, and their weights, with it."""
    return rng.integers(0, n, size=(RESAMPLES, n))


def hierarchical_levels(
    runs: Sequence[Sequence[float]], seed: int = SEED, mean: bool = False
) -> np.ndarray:
    """:data:`RESAMPLES` resampled levels of a side of runs: runs drawn with replacement, then
    each drawn run's values with replacement; each drawn run's median, and their geometric mean.
    ``mean``: each run's mean, and with two runs or more the runs alone are drawn — a run's
    steps are not alike (one start-up an epoch), so drawing them would put the start-up in a
    resample 0 to 4 times where every run has it once: only the runs' spread is the level's
    doubt."""
    import numpy as np

    rng = np.random.default_rng(seed)
    k = len(runs)
    if mean and k >= 2:
        means = np.log(np.maximum([float(np.mean(r)) for r in runs], 1e-12))
        return np.asarray(np.exp(means[rng.integers(0, k, size=(RESAMPLES, k))].mean(axis=1)))
    width = max(len(r) for r in runs)
    table = np.full((k, width), np.nan)
    for i, r in enumerate(runs):
        table[i, : len(r)] = r
    lengths = np.array([len(r) for r in runs])
    picked = rng.integers(0, k, size=(RESAMPLES, k))  # which run fills each slot
    u = rng.random((RESAMPLES, k, width))
    steps = np.floor(u * lengths[picked][:, :, None]).astype(int)
    values = table[picked[:, :, None], steps]
    mask = np.arange(width)[None, None, :] < lengths[picked][:, :, None]
    kept = np.where(mask, values, np.nan)
    medians = np.nanmean(kept, axis=2) if mean else np.nanmedian(kept, axis=2)  # (RESAMPLES, k)
    return np.asarray(np.exp(np.log(np.maximum(medians, 1e-12)).mean(axis=1)))
