"""Helpers shared by the host-side rules (``host_*``): reading the recorder's keys safely.

The rules read only the profile document, which may come from any gpuopt version or from a
trace (where these keys are empty or null), so every read tolerates a missing or odd value.
"""

from __future__ import annotations

from typing import Any

from gpuopt.findings.model import Severity

_ORDER: dict[str, int] = {"low": 0, "medium": 1, "high": 2}


def num(value: Any, default: float = 0.0) -> float:
    """A finite number from the document, or ``default``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    if value != value or value in (float("inf"), float("-inf")):
        return default
    return float(value)


def entries(doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = doc.get(key)
    return [e for e in value if isinstance(e, dict)] if isinstance(value, list) else []


def obj(doc: dict[str, Any], key: str) -> dict[str, Any]:
    value = doc.get(key)
    return value if isinstance(value, dict) else {}


def at_least(severity: Severity, floor: Severity) -> Severity:
    return severity if _ORDER[severity] >= _ORDER[floor] else floor


def fmt_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def fmt_count(n: float) -> str:
    return str(int(n)) if float(n).is_integer() else f"{n:.1f}"


def pct(share: float) -> str:
    return f"{share * 100:.1f}%"


def on_cpu_only(doc: dict[str, Any]) -> bool:
    """Whether the recorder ran without an accelerator (its device findings are inferred)."""
    return obj(doc, "dispatch").get("measured_device") == "cpu"


def step_us(doc: dict[str, Any]) -> float | None:
    """The step time in microseconds: the recorder window's (corrected), else the run's median."""
    window = num(obj(doc, "dispatch").get("step_time_us"))
    if window > 0:
        return window
    median = num(
        obj(doc, "steps").get("time_s", {}).get("median")
        if isinstance(obj(doc, "steps").get("time_s"), dict)
        else None
    )
    return median * 1e6 if median > 0 else None


def share_of(
    doc: dict[str, Any], entry: dict[str, Any], share_key: str, us_key: str
) -> float | None:
    """An entry's share of the step: as recorded, or from its time per step (trace documents
    carry times without shares); None when the document has neither."""
    if isinstance(entry.get(share_key), (int, float)):
        return num(entry.get(share_key))
    us = entry.get(us_key)
    step = step_us(doc)
    if isinstance(us, (int, float)) and step:
        return min(max(float(us) / step, 0.0), 1.0)
    return None


def site_of(entry: dict[str, Any]) -> str | None:
    site = entry.get("site")
    return str(site) if site else None


def plural(n: float, one: str, many: str) -> str:
    """``"1 call"``, ``"3 calls"``, ``"2.5 calls"``."""
    return f"{fmt_count(n)} {one if n == 1 else many}"


def from_trace(doc: dict[str, Any]) -> bool:
    """A ``gpuopt report TRACE`` document: the trace rules (``gpu_trace``) report these causes
    from the trace itself, so the host rules stay silent rather than report them twice."""
    return doc.get("source") == "trace"
