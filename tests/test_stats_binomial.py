"""The binomial distribution's lower tail (gpuopt.stats.binomial) against the exact sum."""

from __future__ import annotations

import math
import random

from gpuopt.stats.binomial import lower_tail


def _exact(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))


def test_the_lower_tail_is_the_exact_sum() -> None:
    rng = random.Random(0)
    for _ in range(2000):
        n = rng.randint(1, 300)
        k, p = rng.randint(0, n), rng.uniform(0.001, 0.999)
        assert math.isclose(lower_tail(k, n, p), _exact(k, n, p), rel_tol=1e-7, abs_tol=1e-12)


def test_the_edges_and_a_large_count() -> None:
    assert lower_tail(0, 40, 0.0) == 1.0 and lower_tail(40, 40, 0.3) == 1.0
    assert lower_tail(3, 40, 1.0) == 0.0
    assert math.isclose(lower_tail(0, 40, 0.1), 0.9**40)
    # far below the mean of 50,000: a tail too small for a float, in a few terms
    assert lower_tail(40_000, 100_000, 0.5) == 0.0
