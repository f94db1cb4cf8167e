"""The binomial distribution's lower tail, without scipy.

Pure Python (math), exact to the float's precision: the tail on the far side of the mean from
``k`` is summed (below the mean the lower tail itself, above it one minus the upper), from the
term nearest the mean, outward by the ratio of neighbouring terms, to where they no longer add to
the sum (the terms fall off fast away from the mean: a few terms, not ``k``).
"""

from __future__ import annotations

import math


def lower_tail(k: int, n: int, p: float) -> float:
    """P(X <= k) for X binomial with ``n`` trials of probability ``p`` (0 <= k <= n)."""
    if p <= 0.0 or k >= n:
        return 1.0
    if p >= 1.0:
        return 0.0
    if k < n * p:
        return min(_sum_outward(k, n, p, down=True), 1.0)
    return max(1.0 - _sum_outward(k + 1, n, p, down=False), 0.0)


def _sum_outward(j: int, n: int, p: float, down: bool) -> float:
    """The terms from ``j`` down to 0 (``down``) or up to ``n``, while they still add up."""
    q = 1.0 - p
    term = math.exp(
        math.lgamma(n + 1)
        - math.lgamma(j + 1)
        - math.lgamma(n - j + 1)
        + j * math.log(p)
        + (n - j) * math.log(q)
    )
    total = term
    while term > total * 1e-17:
        if down:
            if j == 0:
                break
            term *= j / (n - j + 1) * q / p
            j -= 1
        else:
            if j == n:
                break
            term *= (n - j) / (j + 1) * p / q
            j += 1
        total += term
    return total
