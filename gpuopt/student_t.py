"""Student's t 95th percentiles (the ends of a 90% two-sided interval) for few degrees of
freedom: findings' evidence and optimize's paired gain read the one table."""

from __future__ import annotations

# 1..10 degrees of freedom (1.81 at 10, 1.70 at 30)
T95 = (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812)


def t95(df: int, past: float) -> float:
    """The 95th percentile at ``df`` degrees of freedom (1 to 10); ``past`` beyond the table."""
    return T95[df - 1] if 1 <= df <= len(T95) else past
