"""Findings as every report format shows them: ranked by estimated gain, each with the measured
evidence behind it (formatted by the unit its name carries) and the estimate models numbered as
footnotes; and what to say when there are none."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field

from gpuopt.model.records import given
from gpuopt.report.headline import no_steps
from gpuopt.units import (
    fmt_bytes,
    fmt_duration,
    fmt_frac,
    fmt_pct,
    fmt_scalar,
    fmt_us,
    num,
    one_line,
)

if TYPE_CHECKING:
    from gpuopt.model.profile import Finding, Profile

SEVERITY_ORDER: dict[str, int] = {"high": 0, "medium": 1, "low": 2}


def ordered_findings(profile: Profile) -> list[Finding]:
    """Findings ranked by estimated gain (the engine's order: est. speedup, then severity, then
    id); a finding without a finite estimate counts as no gain."""
    return sorted(
        profile.findings,
        key=lambda f: (-(num(f.est_speedup) or 1.0), SEVERITY_ORDER.get(f.severity, 3), f.id),
    )


def no_findings_message(profile: Profile) -> str:
    """Why the findings list is empty: a run that measured no step had nothing to analyse,
    which is not the same as a clean run."""
    if profile.steps.measured == 0 and no_steps(profile):
        return "None: no measured steps, so there was nothing to analyse."
    return "None: no rule found a cause of idle time in this run."


def evidence_summary(finding: Finding) -> str:
    """The evidence's summary, and, for a borderline finding, that it is one."""
    summary = one_line(finding.evidence.get("summary"))
    note = borderline_note(finding)
    return f"{summary}; {note}" if summary and note else summary or note


def borderline_note(finding: Finding) -> str:
    """``borderline: data wait share 26.0% (22.1% … 29.9%), within noise of a threshold: never
    HIGH``; "" for a finding that is not borderline."""
    iv = given(finding.interval)
    if finding.borderline is not True or iv is None:
        return ""
    what = one_line(iv.metric).replace("_", " ")
    busy = " (measured on a busy machine)" if "busy machine" in one_line(iv.covers) else ""
    return (
        f"borderline: {what} {fmt_frac(iv.value)} ({fmt_frac(iv.low)} … {fmt_frac(iv.high)}), "
        f"within noise of a threshold{busy}: never HIGH"
    )


def evidence_numbers(finding: Finding, limit: int = 12) -> list[tuple[str, str]]:
    """The measured values behind a finding (everything in ``evidence`` but the summary), as
    ``(name, formatted value)``; nested values are shown compactly."""
    out = []
    for k, v in finding.evidence.items():
        if k == "summary":
            continue
        out.append((one_line(k), fmt_evidence_value(str(k), v)))
        if len(out) >= limit:
            break
    return out


# evidence keys whose name carries no unit, and the name that says it (the keys are contract)
_UNIT_NAMES = {"extra_by_part": "extra_by_part_s"}  # StragglerEvidence: seconds per step


def fmt_evidence_value(key: str, value: Any) -> str:
    """Format a measured value by the unit its name carries (``data_wait_s_per_step`` → a
    duration, ``bytes_per_step`` → bytes, ``*_us``, ``*_pct``, ``*share``/``*frac``/``*util*``
    → percent); a name without a unit keeps the plain number."""
    key = _UNIT_NAMES.get(key, key)
    if isinstance(value, dict):
        return _fmt_evidence_dict(key, value)
    v = num(value)
    if v is None:
        return fmt_scalar(value)
    tokens = set(re.split(r"[^a-z0-9]+", key.lower()))
    if tokens & {"bytes", "byte"}:
        return fmt_bytes(v)
    if tokens & {"s", "sec", "seconds"}:
        return fmt_duration(v)
    if "us" in tokens:
        return fmt_us(v)
    if "ms" in tokens:
        return fmt_duration(v / 1e3)
    if "pct" in tokens:
        return fmt_pct(v)
    if tokens & {"share", "frac", "fraction", "util", "utilization"} and 0 <= v <= 1:
        return fmt_frac(v)
    return fmt_scalar(value)


def _fmt_evidence_dict(key: str, value: dict[Any, Any]) -> str:
    """E.g. ``idle_by_cause_ms``: the five largest parts, in the unit the key names (``rank 1
    22.2 ms, rank 0 2.03 ms`` for a dict keyed by rank)."""
    parts = sorted(
        ((k, num(v)) for k, v in value.items()),
        key=lambda kv: -(kv[1] if kv[1] is not None else -math.inf),
    )
    # keyed by number: per-rank values (StragglerEvidence's dicts), said as such
    ranks = all(str(k).isdigit() for k in value)
    shown = [
        f"{'rank ' if ranks else ''}{one_line(k)} "
        f"{fmt_evidence_value(key, v) if v is not None else fmt_scalar(value[k])}"
        for k, v in parts[:5]
    ]
    return ", ".join(shown) + (", …" if len(parts) > 5 else "")


class Footnotes(Struct):
    """Numbers the estimate models so each distinct model is explained once (text and md)."""

    models: list[str] = field(default_factory=list)

    def ref(self, model: str | None) -> int | None:
        m = one_line(model)
        if not m:
            return None
        if m not in self.models:
            self.models.append(m)
        return self.models.index(m) + 1
