"""The headline facts every report format shows first, read from the typed document: who ran
what where (the header), the step-time statistics and the per-step series, where step time
goes, why a run has no result, and the warnings.

The four renderers must agree on every number they print (a p90 of "41.2 ms" in the terminal
and "41.20 ms" in the HTML page makes a reader doubt both), so they only lay out what these
functions give; numbers are formatted by :mod:`gpuopt.units`, which shows a value the document
does not have (None, NaN) as :data:`~gpuopt.units.MISSING`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import Struct

from gpuopt.model.records import given
from gpuopt.units import MISSING, fmt_bytes, fmt_count, fmt_duration, fmt_frac, num, one_line

if TYPE_CHECKING:
    from gpuopt.model.profile import Breakdown, GpuInfo, Profile

BREAKDOWN_ORDER: tuple[str, ...] = ("data_wait", "h2d", "sync", "compute", "other")
BREAKDOWN_LABELS: dict[str, str] = {
    "data_wait": "data wait",
    "h2d": "host→device copies",
    "sync": "syncs",
    "compute": "compute",
    "other": "other",
    "collective": "collectives",
}
STEP_STATS: tuple[tuple[str, str], ...] = (
    ("median", "median"),
    ("p10", "p10"),
    ("p90", "p90"),
    ("mean", "mean"),
)


def device_summary(profile: Profile) -> str:
    """``"cuda · 8× NVIDIA H100 80GB HBM3 (79.6 GiB)"`` or ``"cpu · 16 cores"``."""
    env = profile.environment
    parts = [one_line(env.device) or MISSING]
    names: dict[str, list[GpuInfo]] = {}
    for g in env.gpus:
        names.setdefault(one_line(g.name) or "GPU", []).append(g)
    for name, group in names.items():
        mem = num(group[0].memory_bytes)
        count = f"{len(group)}× " if len(group) > 1 else ""
        parts.append(f"{count}{name}" + (f" ({fmt_bytes(mem)})" if mem else ""))
    cores = num(env.cpu_count)
    if cores is not None:
        parts.append(f"{int(cores)} CPU cores")
    return " · ".join(parts)


NO_STEPS_HINT = (
    "gpuopt counts a step at each optimizer.step(), without an optimizer at each "
    "loss.backward(); elsewhere add `import gpuopt` and call gpuopt.step() once per step"
)


def steps_summary(profile: Profile) -> str:
    """``"48 measured · 2 warm-up · 50 total"``."""
    steps = profile.steps
    parts = [
        f"{fmt_count(steps.measured)} measured",
        f"{fmt_count(steps.warmup)} warm-up",
        f"{fmt_count(steps.count)} total",
    ]
    marker = one_line(given(steps.marker) or "")
    marked = [one_line(m) for m in given(steps.marked_by) or [] if one_line(m)]
    if marker:
        note = " (no optimizer.step() seen)" if marker == "loss.backward" else ""
        parts.append(f"marked by {marker}(){note}")
    elif marked:
        parts.append("marked by " + " + ".join(f"{m}()" for m in marked))
    if profile.stopped_by_steps is True:
        parts.append("stopped by --steps")
    fw = given(profile.framework)
    if fw is not None:  # docs/frameworks.md
        through = f"through {one_line(fw.name)} {one_line(fw.version or '')}".rstrip()
        if fw.entry:
            through += f" from {one_line(fw.entry)}"
        evals = [p for p in fw.phases if p.name != "train"]
        through += "".join(f", {one_line(p.name)} {fmt_count(p.steps)} batches" for p in evals)
        parts.append(through)
    return " · ".join(parts)


def header_facts(profile: Profile) -> list[tuple[str, str]]:
    """The run's identity, in the order every format shows it (values are plain, unescaped)."""
    facts: list[tuple[str, str]] = [
        ("script", one_line(profile.script) or MISSING),
        ("status", one_line(profile.status) or MISSING),
        ("exit code", MISSING if profile.exit_code is None else str(profile.exit_code)),
        ("device", device_summary(profile)),
        ("steps", steps_summary(profile)),
        ("wall time", fmt_duration(given(profile.wall_s))),
    ]
    if profile.argv:
        facts.append(("argv", " ".join(one_line(a) for a in profile.argv)))
    env = profile.environment
    versions = []
    if env.python:
        versions.append(f"python {one_line(env.python)}")
    if env.torch:
        versions.append(f"torch {one_line(env.torch)}")
    if versions:
        facts.append(("versions", " · ".join(versions)))
    optional = (("source", profile.source), ("started", profile.started_at), ("cwd", profile.cwd))
    facts += [(label, one_line(value)) for label, value in optional if given(value)]
    return facts


def error_line(profile: Profile) -> str | None:
    """``"RuntimeError: CUDA out of memory"`` for a failed run, else None."""
    err = given(profile.error)
    if err is not None:
        kind, msg = one_line(err.type), one_line(err.message)
        line = f"{kind}: {msg}" if kind and msg else (kind or msg)
        if line:
            return line
    if profile.status == "error":
        return f"the script failed (exit code {profile.exit_code})"
    if profile.status == "interrupted":
        return "the run was interrupted; statistics cover the steps finished before that"
    return None


def step_stats(profile: Profile) -> list[tuple[str, float | None]]:
    """``[("median", 0.041), ("p10", ...), ("p90", ...), ("mean", ...)]`` in seconds."""
    ts = profile.steps.time_s
    return [(label, num(getattr(ts, key))) for key, label in STEP_STATS]


def no_steps(profile: Profile) -> bool:
    """No step time statistic at all: the run measured no step."""
    return all(v is None for _, v in step_stats(profile))


def breakdown_items(breakdown: Breakdown | None) -> list[tuple[str, str, float]]:
    """``[(key, label, fraction)]`` in the canonical order; an empty list when nothing was
    measured (all zero or missing), so renderers say so instead of drawing an empty bar."""
    if breakdown is None:
        return []
    keys = list(BREAKDOWN_ORDER)
    if given(breakdown.collective) is not None:  # multi-rank runs: after the other waits
        keys.insert(keys.index("compute"), "collective")
    items = [
        (k, BREAKDOWN_LABELS[k], max(0.0, num(given(getattr(breakdown, k))) or 0.0)) for k in keys
    ]
    return items if sum(v for _, _, v in items) > 0 else []


class StepSplit(Struct, frozen=True):
    """One step's time split into the measured parts; ``rest_s`` is the step time they do not
    explain (compute and other), never negative."""

    index: int
    time_s: float
    data_wait_s: float
    h2d_s: float
    sync_s: float
    rest_s: float
    warmup: bool
    start_s: float | None

    def parts(self) -> list[tuple[str, float]]:
        """``(part, seconds)`` bottom to top, as the per-step chart stacks them."""
        return [
            ("data_wait", self.data_wait_s),
            ("h2d", self.h2d_s),
            ("sync", self.sync_s),
            ("rest", self.rest_s),
        ]


def step_series(profile: Profile) -> list[StepSplit]:
    """Every step with a finite, non-negative time, warm-up included, in document order."""
    out: list[StepSplit] = []
    for rec in profile.steps.series:
        t = num(rec.time_s)
        if t is None or t < 0:
            continue
        data_wait, h2d, sync = (
            max(0.0, num(given(v)) or 0.0) for v in (rec.data_wait_s, rec.h2d_s, rec.sync_s)
        )
        out.append(
            StepSplit(
                index=rec.index,
                time_s=t,
                data_wait_s=data_wait,
                h2d_s=h2d,
                sync_s=sync,
                rest_s=max(0.0, t - (data_wait + h2d + sync)),
                warmup=bool(rec.warmup),
                start_s=num(rec.start_s),
            )
        )
    return out


def warnings_list(profile: Profile) -> list[str]:
    return [one_line(w) for w in profile.warnings if one_line(w)]


def overhead_line(profile: Profile) -> str | None:
    """What gpuopt itself cost the run (the ``overhead`` key), one line; None without the key."""
    from gpuopt.model.profile import Overhead

    o = profile.overhead
    if not isinstance(o, Overhead):
        return None
    return (
        f"gpuopt's own cost this run: {fmt_duration(o.total_s)} ({fmt_frac(o.share)} of it): "
        f"start {fmt_duration(o.start_s)}, {fmt_duration(o.per_step_s)} a step over "
        f"{fmt_count(o.steps)} steps, sampling threads {fmt_duration(o.threads_s)} of CPU, "
        f"{fmt_count(o.window_steps)} recorded steps {fmt_duration(o.windows_s)}, "
        f"end {fmt_duration(o.end_s)} (measured)"
    )
