"""Medians and percentiles, with numpy's arithmetic where numpy is the reference.

Why not ``np.median`` / ``np.percentile``: with numpy 2.x they check for masked arrays and so
import ``numpy.ma`` on their first call (15-20 ms, more than some whole analyses), paid once per
``gpuopt report``. :func:`percentile` and :func:`median` give the same floats as numpy's for 1-d
float samples; :func:`median_last_axis` is ``np.median(x, axis=-1)``.

Two linear interpolations are in use, and they differ in the last bit where the fraction is 0.5
or more: numpy's (:func:`percentile`: ``b - (b - a) * (1 - t)`` there) and the plain
``a + (b - a) * t`` of :func:`quantile_sorted` (a profile's p10/p90 of step time, the gate's
interval ends). Each caller keeps the one it has, so its outputs stay the same to the bit.

numpy is imported inside the functions: :func:`quantile_sorted` is pure Python and runs where
numpy is not loaded (the profiled run's summary).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


def quantile_sorted(sorted_xs: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0-1) of an already sorted, non-empty sequence, interpolated linearly
    as ``a + (b - a) * t``."""
    if not sorted_xs:
        raise ValueError("empty")
    pos = (len(sorted_xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def percentiles(x: npt.ArrayLike, ps: Sequence[float]) -> list[float]:
    """``np.percentile(x, ps)`` (default "linear" method) of a non-empty 1-d sequence, with the
    same arithmetic (so the same floats), sorted once."""
    import numpy as np

    s = np.sort(np.asarray(x, dtype=np.float64), axis=None)
    if np.isnan(s[-1]):
        return [float("nan")] * len(ps)
    return [_lerp_numpy(s, p) for p in ps]


def percentile(x: npt.ArrayLike, p: float) -> float:
    """``np.percentile(x, p)``, the same float (:func:`percentiles`)."""
    return percentiles(x, (p,))[0]


def _lerp_numpy(s: np.ndarray, p: float) -> float:
    """numpy's linear percentile ``p`` (0-100) of the sorted, NaN-free ``s``."""
    virtual = (s.size - 1) * (p / 100)
    if virtual >= s.size - 1:  # at or past the last value: numpy interpolates it with itself
        lo = hi = -1
    else:
        lo = math.floor(virtual)
        hi = lo + 1
    t = virtual - lo
    a, b = float(s[lo]), float(s[hi])
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def median(x: npt.ArrayLike) -> float:
    """``np.median`` of a non-empty 1-d sequence: the middle value, or the mean of the two middle
    ones; NaN if any value is NaN."""
    import numpy as np

    s = np.sort(np.asarray(x, dtype=np.float64), axis=None)
    if np.isnan(s[-1]):
        return float("nan")
    h = s.size // 2
    return float(s[h]) if s.size % 2 else float((s[h - 1] + s[h]) / 2)


def median_last_axis(x: np.ndarray) -> np.ndarray:
    """The median over the last axis (``np.median(x, axis=-1)`` for NaN-free values)."""
    import numpy as np

    s = np.sort(x, axis=-1)
    n = s.shape[-1]
    mid = n // 2
    return np.asarray(s[..., mid] if n % 2 else (s[..., mid - 1] + s[..., mid]) / 2)
