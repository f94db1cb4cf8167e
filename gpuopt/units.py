"""Numbers as people read them: durations, bytes, shares, counts, estimated speedups (and a
site's ``path:line`` read back).

The one formatter of gpuopt: every report format and every finding's title and summary format
their numbers here, so a p90 of "41.2 ms" in the terminal is "41.2 ms" in the HTML page and a copy
of "96.0 MiB" in a finding's title is "96.0 MiB" in the transfers table. Every function takes
anything (a value read from a document may be null, NaN, or a string) and shows what is not a
finite number as :data:`MISSING`, never as "0".
"""

from __future__ import annotations

import math
from typing import Any

MISSING = "–"  # shown for a value the document does not have (never "0", which would be a claim)
ESTIMATE_LABEL = "est."


def num(value: Any) -> float | None:
    """A finite float, or None (for null, NaN, inf, booleans, strings and anything else)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


# (from this many seconds, multiply by, name)
_DURATION_UNITS = ((1.0, 1.0, "s"), (1e-3, 1e3, "ms"), (1e-6, 1e6, "µs"), (1e-9, 1e9, "ns"))


def duration_unit(seconds: float) -> tuple[float, str]:
    """``(factor, name)``: a duration is shown as ``seconds * factor`` ``name`` (a chart's axis
    labels all its ticks in the unit of its top tick): ``0.0412`` → ``(1e3, "ms")``."""
    a = abs(seconds)
    for least, factor, name in _DURATION_UNITS:
        if a >= least:
            return factor, name
    return _DURATION_UNITS[-1][1:]


def byte_unit(n: float) -> tuple[int, str]:
    """``(divisor, name)`` of the binary unit a byte count is shown in: ``1572864`` →
    ``(1048576, "MiB")``."""
    unit = 0
    while abs(n) >= 1024 ** (unit + 1) and unit < len(BYTE_UNITS) - 1:
        unit += 1
    return 1024**unit, BYTE_UNITS[unit]


def fmt_duration(seconds: Any) -> str:
    """``0.0412`` → ``"41.2 ms"``; three significant digits from ns to hours."""
    s = num(seconds)
    if s is None:
        return MISSING
    if s == 0:
        return "0 s"
    if abs(s) < 60:
        factor, name = duration_unit(s)
        return f"{_sig3(s * factor)} {name}"
    if abs(s) < 3600 - 0.5:
        m, sec = divmod(round(s), 60)  # rounded first: 179.6 s is 3 min 00 s, not 2 min 60 s
        return f"{int(m)} min {sec:02.0f} s"
    h, rest = divmod(round(s / 60), 60)
    return f"{int(h)} h {rest:02.0f} min"


def fmt_us(microseconds: Any) -> str:
    us = num(microseconds)
    return MISSING if us is None else fmt_duration(us / 1e6)


def _sig3(x: float) -> str:
    """Three significant digits without exponent: 41.23 → 41.2, 412.3 → 412, 4.123 → 4.12."""
    a = abs(x)
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")  # binary, as torch and nvidia-smi


def fmt_bytes(n: Any) -> str:
    """Binary units, as torch and nvidia-smi report memory: ``1572864`` → ``"1.50 MiB"``."""
    b = num(n)
    if b is None:
        return MISSING
    if abs(b) < 1024:
        return f"{b:.0f} B"
    divisor, name = byte_unit(b)
    return f"{_sig3(b / divisor)} {name}"


def fmt_frac(fraction: Any, digits: int = 1) -> str:
    """A fraction in [0, 1] as a percentage: ``0.4567`` → ``"45.7%"``."""
    f = num(fraction)
    return MISSING if f is None else f"{f * 100:.{digits}f}%"


def fmt_pct(percent: Any, digits: int = 1) -> str:
    """A value already in percent (the contract's ``*_pct`` keys, 0–100)."""
    p = num(percent)
    return MISSING if p is None else f"{p:.{digits}f}%"


def fmt_util(percent: Any) -> str:
    """A utilization in percent: whole numbers, one decimal below 10% (0.5% is not "1%")."""
    p = num(percent)
    return MISSING if p is None else fmt_pct(p, 0 if abs(p) >= 10 else 1)


def fmt_count(value: Any) -> str:
    """Counts: integers with thousands separators, per-step averages with up to 2 decimals."""
    v = num(value)
    if v is None:
        return MISSING
    if float(v).is_integer() and abs(v) < 1e15:
        return f"{int(v):,}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:,.2f}".rstrip("0").rstrip(".")


def fmt_speedup(value: Any) -> str:
    """An estimated whole-step speedup, always labelled as an estimate: ``"est. 1.85×"``."""
    v = num(value)
    return MISSING if v is None else f"{ESTIMATE_LABEL} {v:.2f}×"


def fmt_scalar(value: Any) -> str:
    """A cell of a generic table (``tables[].rows``): the value as the analysis wrote it, with
    floats rounded for reading (4 significant digits, no exponent for ordinary magnitudes)."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 1000 else str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return MISSING
        if value == 0:
            return "0"
        a = abs(value)
        if 1e-4 <= a < 1e15:
            digits = max(0, 3 - int(math.floor(math.log10(a))))
            s = f"{value:,.{digits}f}"
            return s.rstrip("0").rstrip(".") if "." in s else s
        return f"{value:.3e}"
    if isinstance(value, (list, dict)):
        import json

        return one_line(json.dumps(value, ensure_ascii=False, default=str))[:200]
    return one_line(value)


def text(value: Any) -> str:
    """A string for display ("" for null). Only data, never markup: renderers escape it."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def one_line(value: Any) -> str:
    """Collapse newlines and runs of spaces (for table cells and list items)."""
    return " ".join(text(value).split())


def site_line(site: str) -> tuple[str, int] | None:
    """A site's file and line: ``"src/train.py:42"`` → ``("src/train.py", 42)``; None for a
    site that names no line."""
    path, _, line = site.rpartition(":")
    return (path, int(line)) if path and line.isdigit() else None


def plural(n: float, one: str, many: str) -> str:
    """``"1 call"``, ``"3 calls"``, ``"2.5 calls"``, ``"1,200 calls"``."""
    return f"{fmt_count(n)} {one if n == 1 else many}"
