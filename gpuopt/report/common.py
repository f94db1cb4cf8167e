"""What every report format shares: safe reading of the document, number formatting, site links,
ordering, and the headline facts (the detail tables are in :mod:`gpuopt.report.sections`).

Why one module: the four renderers must agree on every number they print (a p90 of "41.2 ms" in
the terminal and "41.20 ms" in the HTML page makes a reader doubt both), on the order of findings
and table rows, and on how a missing key is shown. So the renderers only lay out; they read the
document through these helpers and never format a number themselves.

The document may come from an older gpuopt, a trace, or a hand-edited file: every accessor here
tolerates missing keys, ``null``, wrong types, NaN and infinities, and shows them as
:data:`MISSING` instead of raising. Nothing here imports torch, pandas or numpy.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any
from urllib.parse import quote

from gpuopt.units import (  # noqa: F401  (re-exported: the renderers read them through this module)
    ESTIMATE_LABEL,
    MISSING,
    fmt_bytes,
    fmt_count,
    fmt_duration,
    fmt_frac,
    fmt_pct,
    fmt_scalar,
    fmt_speedup,
    fmt_us,
    fmt_util,
    num,
    one_line,
    text,
)

BREAKDOWN_ORDER: tuple[str, ...] = ("data_wait", "h2d", "sync", "compute", "other")
BREAKDOWN_LABELS: dict[str, str] = {
    "data_wait": "data wait",
    "h2d": "host→device copies",
    "sync": "syncs",
    "compute": "compute",
    "other": "other",
}
SEVERITY_ORDER: dict[str, int] = {"high": 0, "medium": 1, "low": 2}
WOULD_BLOCK_LABEL = "would block on a GPU"

# ---------------------------------------------------------------------------------------------
# Safe access
# ---------------------------------------------------------------------------------------------


def get(obj: Any, *path: str | int, default: Any = None) -> Any:
    """``obj[k1][k2]...`` or ``default`` when any step is missing, null or of the wrong type."""
    cur = obj
    for key in path:
        if isinstance(key, int) and isinstance(cur, list):
            if -len(cur) <= key < len(cur):
                cur = cur[key]
                continue
            return default
        if isinstance(cur, dict) and key in cur:
            cur = cur[key]
            continue
        return default
    return default if cur is None else cur


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(value: Any) -> str:
    """Text safe to print on a terminal: control characters (ANSI escapes, carriage returns,
    bidi overrides) from the document are shown as ``\\xNN`` instead of acting on the terminal."""
    s = text(value)

    def repl(m: re.Match[str]) -> str:
        c = ord(m.group(0))
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"

    return _CONTROL.sub(repl, s.replace("\t", " "))


def sort_key(value: Any) -> float | str:
    """A key for sorting table columns: the number itself where there is one, else the text."""
    v = num(value)
    return v if v is not None else text(value)


# ---------------------------------------------------------------------------------------------
# Sites
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SiteLinks:
    """Where a site points on disk, and the two links the HTML report offers for it."""

    path: str  # absolute path as text
    line: int
    vscode: str  # vscode://file/<abs>:<line>:1 (opens the editor at the line)
    file: str  # file:///<abs> (opens the file in the browser)


def split_site(site: Any) -> tuple[str, int | None]:
    """``"src/train.py:42"`` → ``("src/train.py", 42)``; a site without a line keeps None."""
    s = text(site)
    head, sep, tail = s.rpartition(":")
    if sep and head and tail.isdigit():
        return head, int(tail)
    return s, None


def site_links(site: Any, cwd: Any) -> SiteLinks | None:
    """Links for a site, made absolute with the run's ``cwd``; None when that cannot be done
    honestly (no line number, a pseudo-file such as ``<stdin>``, or a relative path and no cwd)."""
    path, line = split_site(site)
    if line is None or not path or path.startswith("<"):
        return None
    abs_path = _absolute(path, text(cwd))
    if abs_path is None:
        return None
    url_path = _url_path(abs_path)
    return SiteLinks(
        path=abs_path,
        line=line,
        vscode=f"vscode://file{url_path}:{line}:1",
        file=f"file://{url_path}",
    )


def _absolute(path: str, cwd: str) -> str | None:
    win = PureWindowsPath(path)
    if win.drive and win.root:
        return str(win)
    if path.startswith("/"):
        return str(PurePosixPath(path))
    if not cwd:
        return None
    cwd_win = PureWindowsPath(cwd)
    if cwd_win.drive and cwd_win.root:
        return str(cwd_win / path)
    if not cwd.startswith("/"):
        return None
    # normalise "a/../b" lexically (the file may no longer exist; never touch the disk here)
    parts: list[str] = []
    for part in PurePosixPath(cwd, path).parts[1:]:
        if part == "..":
            if parts:
                parts.pop()
        elif part not in (".", ""):
            parts.append(part)
    return "/" + "/".join(parts)


def _url_path(abs_path: str) -> str:
    """Percent-encoded URL path ("/C:/x" for Windows drives); only unreserved characters, "/" and
    a drive colon stay literal, so quotes, spaces, "<", "#" and "?" can never end the URL."""
    win = PureWindowsPath(abs_path)
    if win.drive and win.root:
        rest = abs_path[len(win.drive) :].replace("\\", "/")
        return "/" + quote(win.drive, safe=":") + quote(rest, safe="/")
    return quote(abs_path, safe="/")


# ---------------------------------------------------------------------------------------------
# Facts shared by every format
# ---------------------------------------------------------------------------------------------


def device_summary(doc: dict[str, Any]) -> str:
    """``"cuda · 8× NVIDIA H100 80GB HBM3 (79.6 GiB)"`` or ``"cpu · 16 cores"``."""
    env = as_dict(doc.get("environment"))
    device = text(env.get("device")) or MISSING
    gpus = [g for g in as_list(env.get("gpus")) if isinstance(g, dict)]
    parts = [device]
    if gpus:
        names: dict[str, list[dict[str, Any]]] = {}
        for g in gpus:
            names.setdefault(one_line(g.get("name")) or "GPU", []).append(g)
        for name, group in names.items():
            mem = num(group[0].get("memory_bytes"))
            count = f"{len(group)}× " if len(group) > 1 else ""
            parts.append(f"{count}{name}" + (f" ({fmt_bytes(mem)})" if mem else ""))
    cores = num(env.get("cpu_count"))
    if cores is not None:
        parts.append(f"{int(cores)} CPU cores")
    return " · ".join(parts)


def steps_summary(doc: dict[str, Any]) -> str:
    """``"48 measured · 2 warm-up · 50 total"``."""
    steps = as_dict(doc.get("steps"))
    measured = num(steps.get("measured"))
    warm = num(steps.get("warmup"))
    count = num(steps.get("count"))
    parts = [f"{fmt_count(measured)} measured"]
    if warm is not None:
        parts.append(f"{fmt_count(warm)} warm-up")
    if count is not None:
        parts.append(f"{fmt_count(count)} total")
    marked = [one_line(m) for m in as_list(steps.get("marked_by")) if one_line(m)]
    if marked:
        parts.append("marked by " + " + ".join(f"{m}()" for m in marked))
    if doc.get("stopped_by_steps") is True:
        parts.append("stopped by --steps")
    return " · ".join(parts)


def header_facts(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """The run's identity, in the order every format shows it (values are plain, unescaped)."""
    facts: list[tuple[str, str]] = [
        ("script", one_line(doc.get("script")) or MISSING),
        ("status", one_line(doc.get("status")) or MISSING),
        ("exit code", text(doc.get("exit_code")) if doc.get("exit_code") is not None else MISSING),
        ("device", device_summary(doc)),
        ("steps", steps_summary(doc)),
        ("wall time", fmt_duration(doc.get("wall_s"))),
    ]
    argv = [one_line(a) for a in as_list(doc.get("argv"))]
    if argv:
        facts.append(("argv", " ".join(argv)))
    env = as_dict(doc.get("environment"))
    versions = []
    if env.get("python"):
        versions.append(f"python {one_line(env.get('python'))}")
    if env.get("torch"):
        versions.append(f"torch {one_line(env.get('torch'))}")
    if versions:
        facts.append(("versions", " · ".join(versions)))
    if doc.get("source"):
        facts.append(("source", one_line(doc.get("source"))))
    if doc.get("started_at"):
        facts.append(("started", one_line(doc.get("started_at"))))
    if doc.get("cwd"):
        facts.append(("cwd", one_line(doc.get("cwd"))))
    return facts


def error_line(doc: dict[str, Any]) -> str | None:
    """``"RuntimeError: CUDA out of memory"`` for a failed run, else None."""
    err = doc.get("error")
    if isinstance(err, dict):
        kind = one_line(err.get("type"))
        msg = one_line(err.get("message"))
        line = f"{kind}: {msg}" if kind and msg else (kind or msg)
        if line:
            return line
    if isinstance(err, str) and err.strip():
        return one_line(err)
    if doc.get("status") == "error":
        return f"the script failed (exit code {text(doc.get('exit_code')) or MISSING})"
    if doc.get("status") == "interrupted":
        return "the run was interrupted; statistics cover the steps finished before that"
    return None


STEP_STATS: tuple[tuple[str, str], ...] = (
    ("median", "median"),
    ("p10", "p10"),
    ("p90", "p90"),
    ("mean", "mean"),
)


def step_stats(doc: dict[str, Any]) -> list[tuple[str, float | None]]:
    """``[("median", 0.041), ("p10", ...), ("p90", ...), ("mean", ...)]`` in seconds."""
    ts = as_dict(get(doc, "steps", "time_s"))
    return [(label, num(ts.get(key))) for key, label in STEP_STATS]


def breakdown_items(doc: dict[str, Any]) -> list[tuple[str, str, float]]:
    """``[(key, label, fraction)]`` in the canonical order; an empty list when nothing was
    measured (all zero or missing), so renderers say so instead of drawing an empty bar."""
    bd = as_dict(doc.get("breakdown"))
    items = [(k, BREAKDOWN_LABELS[k], max(0.0, num(bd.get(k)) or 0.0)) for k in BREAKDOWN_ORDER]
    return items if sum(v for _, _, v in items) > 0 else []


def step_series(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-step records with finite numbers: ``{index, time_s, data_wait_s, h2d_s, sync_s,
    rest_s, warmup, start_s}``; ``rest_s`` is the step time not explained by the three measured
    parts (compute and other), never negative."""
    out: list[dict[str, Any]] = []
    for i, rec in enumerate(as_list(get(doc, "steps", "series"))):
        if not isinstance(rec, dict):
            continue
        t = num(rec.get("time_s"))
        if t is None or t < 0:
            continue
        parts = {k: max(0.0, num(rec.get(k)) or 0.0) for k in ("data_wait_s", "h2d_s", "sync_s")}
        idx = num(rec.get("index"))
        out.append(
            {
                "index": int(idx) if idx is not None else i,
                "time_s": t,
                **parts,
                "rest_s": max(0.0, t - sum(parts.values())),
                "warmup": bool(rec.get("warmup")),
                "start_s": num(rec.get("start_s")),
            }
        )
    return out


@dataclass
class Timeline:
    """Utilization samples over time. ``series`` values are PERCENT (0–100), as the schema
    defines ``utilization`` (None where a sample is missing); ``memory`` values are bytes."""

    t_s: list[float]
    series: dict[str, list[float | None]]  # "cpu", "gpu"
    memory: dict[str, list[float | None]]  # "rss_bytes", "gpu_memory_bytes"


def timeline(doc: dict[str, Any]) -> Timeline | None:
    """The sampled utilization timeline, aligned to ``t_s``; None when there are no samples."""
    tl = as_dict(get(doc, "utilization", "timeline"))
    t_raw = as_list(tl.get("t_s"))
    t = [num(x) for x in t_raw]
    if not t or all(x is None for x in t):
        return None
    keep = [i for i, x in enumerate(t) if x is not None]
    t_s = [float(t[i]) for i in keep]  # type: ignore[arg-type]

    def aligned(key: str) -> list[float | None] | None:
        vals = tl.get(key)
        if not isinstance(vals, list) or not vals:
            return None
        out = [num(vals[i]) if i < len(vals) else None for i in keep]
        return out if any(v is not None for v in out) else None

    series = {k: v for k in ("cpu", "gpu") if (v := aligned(k)) is not None}
    memory = {k: v for k in ("rss_bytes", "gpu_memory_bytes") if (v := aligned(k)) is not None}
    if not series and not memory:
        return None
    return Timeline(t_s=t_s, series=series, memory=memory)


def utilization_summary(doc: dict[str, Any], key: str) -> tuple[float | None, float | None]:
    """``(mean, max)`` of ``utilization.cpu`` or ``utilization.gpu``, in percent (0–100)."""
    u = as_dict(get(doc, "utilization", key))
    return num(u.get("mean")), num(u.get("max"))


def cpu_cores_note(doc: dict[str, Any]) -> str:
    """``"≈1.8 of 8 cores busy"`` from ``utilization.cpu.cores_busy_mean`` / ``cpu_count``."""
    busy = num(get(doc, "utilization", "cpu", "cores_busy_mean"))
    if busy is None:
        return ""
    cores = num(get(doc, "utilization", "cpu_count"))
    if cores is None:
        cores = num(get(doc, "environment", "cpu_count"))
    return f"≈{busy:.1f} of {int(cores)} cores busy" if cores else f"≈{busy:.1f} cores busy"


def sampling_note(doc: dict[str, Any], tl: Timeline | None) -> str:
    """``"136 samples every 100 ms over 13.5 s"``: how the timeline was sampled."""
    if tl is None or len(tl.t_s) < 2:
        return ""
    interval = num(get(doc, "utilization", "interval_s"))
    if interval is None:
        interval = (tl.t_s[-1] - tl.t_s[0]) / (len(tl.t_s) - 1)
    return f"{len(tl.t_s)} samples every {fmt_duration(interval)} over {fmt_duration(tl.t_s[-1] - tl.t_s[0])}"


_SPARK = "▁▂▃▄▅▆▇█"


def spark(values: list[float | None], lo: float = 0.0, hi: float = 1.0) -> str:
    """One character per value, ``▁`` at ``lo`` to ``█`` at ``hi``; a blank where not sampled."""
    out = []
    span = hi - lo if hi > lo else 1.0
    for v in values:
        if v is None:
            out.append(" ")
            continue
        x = min(1.0, max(0.0, (v - lo) / span))
        out.append(_SPARK[min(len(_SPARK) - 1, int(round(x * (len(_SPARK) - 1))))])
    return "".join(out)


def bar_lengths(fractions: list[float], width: int) -> list[int]:
    """Split ``width`` cells among ``fractions`` by largest remainder (the lengths sum to
    ``width`` exactly, so the bar never jitters by a cell between reports)."""
    total = sum(fractions)
    if total <= 0 or width <= 0:
        return [0] * len(fractions)
    raw = [f / total * width for f in fractions]
    lengths = [int(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: (-(raw[i] - lengths[i]), i))
    for i in order[: width - sum(lengths)]:
        lengths[i] += 1
    return lengths


def utilization_note(doc: dict[str, Any]) -> str:
    return one_line(get(doc, "utilization", "note", default=""))


def gpu_utilization_measured(doc: dict[str, Any]) -> bool:
    mean, mx = utilization_summary(doc, "gpu")
    tl = timeline(doc)
    return mean is not None or mx is not None or (tl is not None and "gpu" in tl.series)


def resample(values: list[float | None], buckets: int) -> list[float | None]:
    """Average ``values`` into ``buckets`` consecutive groups (None where a group has no data);
    shorter inputs are returned as they are."""
    n = len(values)
    if n <= buckets or buckets <= 0:
        return list(values)
    out: list[float | None] = []
    for b in range(buckets):
        lo = b * n // buckets
        hi = max(lo + 1, (b + 1) * n // buckets)
        group = [v for v in values[lo:hi] if v is not None]
        out.append(sum(group) / len(group) if group else None)
    return out


# ---------------------------------------------------------------------------------------------
# Findings
# ---------------------------------------------------------------------------------------------


def rank_key(entry: dict[str, Any]) -> float:
    """Sort key for per-rank entries: by rank number, entries without one last."""
    r = num(entry.get("rank"))
    return r if r is not None else math.inf


def ordered_findings(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Findings ranked by estimated gain (the engine's order: est. speedup, then severity, then
    id), tolerant of bad values; non-dict entries are dropped."""
    items = [f for f in as_list(doc.get("findings")) if isinstance(f, dict)]
    return sorted(
        items,
        key=lambda f: (
            -(num(f.get("est_speedup")) or 1.0),
            SEVERITY_ORDER.get(text(f.get("severity")), 3),
            text(f.get("id")),
        ),
    )


def no_findings_message(doc: dict[str, Any]) -> str:
    """Why the findings list is empty: a run that measured no step had nothing to analyse,
    which is not the same as a clean run."""
    measured = num(get(doc, "steps", "measured")) or 0
    if measured == 0 and all(v is None for _, v in step_stats(doc)):
        return "None: no measured steps, so there was nothing to analyse."
    return "None: no rule found a cause of idle time in this run."


def evidence_summary(finding: dict[str, Any]) -> str:
    ev = finding.get("evidence")
    if isinstance(ev, dict):
        return one_line(ev.get("summary"))
    return one_line(ev) if isinstance(ev, str) else ""


def evidence_numbers(finding: dict[str, Any], limit: int = 12) -> list[tuple[str, str]]:
    """The measured values behind a finding (everything in ``evidence`` but the summary), as
    ``(name, formatted value)``; nested values are shown compactly."""
    ev = finding.get("evidence")
    if not isinstance(ev, dict):
        return []
    out = []
    for k, v in ev.items():
        if k == "summary":
            continue
        out.append((one_line(k), fmt_evidence_value(str(k), v)))
        if len(out) >= limit:
            break
    return out


def fmt_evidence_value(key: str, value: Any) -> str:
    """Format a measured value by the unit its name carries (``data_wait_s_per_step`` → a
    duration, ``bytes_per_step`` → bytes, ``*_us``, ``*_pct``, ``*share``/``*frac``/``*util*``
    → percent); a name without a unit keeps the plain number."""
    if isinstance(value, dict):
        # e.g. idle_by_cause_ms: the largest parts first, in the unit the key names
        parts = sorted(
            ((k, num(v)) for k, v in value.items()),
            key=lambda kv: -(kv[1] if kv[1] is not None else -math.inf),
        )
        shown = [
            f"{one_line(k)} {fmt_evidence_value(key, v) if v is not None else fmt_scalar(value[k])}"
            for k, v in parts[:5]
        ]
        return ", ".join(shown) + (", …" if len(parts) > 5 else "")
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


@dataclass
class Footnotes:
    """Numbers the estimate models so each distinct model is explained once (text and md)."""

    models: list[str] = field(default_factory=list)

    def ref(self, model: Any) -> int | None:
        m = one_line(model)
        if not m:
            return None
        if m not in self.models:
            self.models.append(m)
        return self.models.index(m) + 1


def warnings_list(doc: dict[str, Any]) -> list[str]:
    return [one_line(w) for w in as_list(doc.get("warnings")) if one_line(w)]
