"""One scale for every rule: how severe a cause is, and what removing it could gain (an estimate).

Every finding's ``est_speedup`` is an *estimate* and carries the model it came from; these two
functions are the shared models (Amdahl on the measured share of step time).
"""

from __future__ import annotations

from gpuopt.model.profile import Severity

_ORDER: dict[Severity, int] = {"low": 0, "medium": 1, "high": 2}


def severity_for_share(share: float) -> Severity:
    """Map the share of step time a cause accounts for to a severity (one scale for all rules)."""
    if share >= 0.25:
        return "high"
    if share >= 0.08:
        return "medium"
    return "low"


def at_least(severity: Severity, floor: Severity) -> Severity:
    """``severity``, raised to ``floor`` when it is lower."""
    return severity if _ORDER[severity] >= _ORDER[floor] else floor


def speedup_if_removed(share: float, keep: float = 0.0) -> float:
    """Amdahl estimate: removing ``(1-keep)`` of a ``share`` of step time gives this speedup."""
    remaining = 1.0 - share * (1.0 - keep)
    return 1.0 / max(remaining, 1e-6)
