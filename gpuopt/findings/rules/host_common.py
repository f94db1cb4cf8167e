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
