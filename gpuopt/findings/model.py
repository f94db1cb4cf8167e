"""The finding record shared by every rule, run-time or trace-based."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Severity = Literal["high", "medium", "low"]


@dataclass
class Finding:
    """One diagnosed cause of idle GPU time.

    ``evidence`` holds the measured numbers the rule used plus a one-line ``summary`` a person
    reads; ``fix`` is concrete (the knob and the value, or the code change). ``est_speedup`` is an
    *estimate* (whole-step speedup if the cause were removed), and ``estimate_model`` says how it
    was estimated, so reports can label it as such.
    """

    id: str
    severity: Severity
    title: str
    evidence: dict[str, Any]
    fix: str
    site: str | None = None
    est_speedup: float | None = None
    estimate_model: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        extra = d.pop("extra")
        d.update(extra)
        if d["est_speedup"] is not None:
            d["est_speedup"] = round(float(d["est_speedup"]), 3)
        return d


def severity_for_share(share: float) -> Severity:
    """Map the share of step time a cause accounts for to a severity (one scale for all rules)."""
    if share >= 0.25:
        return "high"
    if share >= 0.08:
        return "medium"
    return "low"


def speedup_if_removed(share: float, keep: float = 0.0) -> float:
    """Amdahl estimate: removing ``(1-keep)`` of a ``share`` of step time gives this speedup."""
    remaining = 1.0 - share * (1.0 - keep)
    return 1.0 / max(remaining, 1e-6)
