"""One value far beyond the others' spread, by the modified z-score (Iglewicz & Hoaglin):
``0.6745 * |x - median| / MAD``, the median absolute deviation standing in for the standard
deviation, so the outlier itself cannot widen the spread it is measured against. Pure Python
(``statistics.median``): its callers hold a few values (one per pair of runs)."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median

Z_OUTLIER = 3.5  # Iglewicz & Hoaglin's cut for the modified z-score
MIN_VALUES = 5  # fewer values: no median and MAD to stand against
# a MAD under this (in the values' units) counts as this: identical values set nothing apart
# for a rounding's difference (log ratios: 1%)
MAD_FLOOR = 0.01


def modified_z(values: Sequence[float]) -> list[float]:
    """Each value's modified z-score against the values' median and MAD."""
    mid = median(values)
    mad = max(median(abs(v - mid) for v in values), MAD_FLOOR)
    return [0.6745 * abs(v - mid) / mad for v in values]


def lone_outlier(values: Sequence[float], cut: float = Z_OUTLIER) -> int | None:
    """The index of the one value whose modified z-score is beyond ``cut``, where exactly one
    is and there are :data:`MIN_VALUES` values at least; else None (two or more beyond it are
    a second mode, not an accident: they stay)."""
    if len(values) < MIN_VALUES:
        return None
    beyond = [i for i, z in enumerate(modified_z(values)) if z > cut]
    return beyond[0] if len(beyond) == 1 else None


__all__ = ["MAD_FLOOR", "MIN_VALUES", "Z_OUTLIER", "lone_outlier", "modified_z"]
