"""``gpuopt compare A B [C ...]``: runs side by side, as pure functions over their Profiles.

The first run is the reference: every other run's column shows its change from it, with the
gate's interval (:mod:`gpuopt.gate.noise`: within-run variation and the run-to-run floor) where
per-step values exist. Findings are matched by id and site: new, gone, changed (severity,
estimate or summary), moved (one id's only site changed lines). Multi-rank runs get a row per
rank; traces get the kernels whose time per step changed most.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuopt.gate import measures as m
from gpuopt.gate.check import (
    DATA_WAIT_DRIFT,
    MIN_STEPS,
    OUTSIDE_OPS_DRIFT,
    Thresholds,
    share_floor,
    step_floor,
)
from gpuopt.gate.noise import RunValues, compare_runs
from gpuopt.gate.runs import Run, busy_text, disturbed
from gpuopt.model.profile import Finding, Profile
from gpuopt.model.records import given
from gpuopt.units import MISSING, fmt_bytes, fmt_duration, fmt_us, num

KERNEL_ROWS = 10
NO_INTERVAL_BUSY = "no interval: a busy machine"


@dataclass(frozen=True)
class Row:
    """One metric across the runs: ``values`` formatted, ``numbers`` raw (None: not measured);
    ``changes`` and ``intervals`` for every run after the first (against the first)."""

    group: str
    metric: str
    values: list[str]
    numbers: list[float | None]
    changes: list[str]
    intervals: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class FindingChange:
    status: str  # new | gone | changed | moved
    id: str
    site: str | None
    before: str  # "high", or "" when new
    after: str  # "high", or "" when gone
    title: str
    detail: str = ""


@dataclass(frozen=True)
class RunInfo:
    path: str
    script: str
    source: str
    device: str
    status: str
    steps: int
    ranks: int


@dataclass(frozen=True)
class Comparison:
    runs: list[RunInfo]
    rows: list[Row]
    findings: list[list[FindingChange]]  # per run after the first
    ranks: list[Row]
    kernels: list[Row]
    notes: list[str] = field(default_factory=list)


def _pct_change(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return MISSING
    if a == 0:
        return "+0.0%" if b == 0 else "new"
    return f"{b / a - 1:+.1%}"


def _pt_change(a: float | None, b: float | None) -> str:
    return MISSING if a is None or b is None else f"{(b - a) * 100:+.1f}pt"


def _abs_change(fmt: Callable[[float], str]) -> Callable[[float | None, float | None], str]:
    def change(a: float | None, b: float | None) -> str:
        if a is None or b is None:
            return MISSING
        d = b - a
        return ("+" if d >= 0 else "-") + fmt(abs(d))

    return change


def _share(x: float | None) -> str:
    return MISSING if x is None else f"{x:.1%}"


def _count(x: float | None) -> str:
    return MISSING if x is None else f"{x:.6g}"


def _row(
    group: str,
    metric: str,
    numbers: list[float | None],
    fmt: Callable[[float | None], str],
    change: Callable[[float | None, float | None], str],
) -> Row:
    first = numbers[0]
    return Row(
        group, metric, [fmt(x) for x in numbers], numbers, [change(first, x) for x in numbers[1:]]
    )


def _with_intervals(
    row: Row, series: list[RunValues], median: bool, log: bool, floor: float, quiet: list[bool]
) -> Row:
    """``row`` with the interval of each run against the first: none where a side has too few
    steps, and where a side ran on a busy machine a cell that says it cannot be drawn."""
    texts = []
    for s, calm in zip(series[1:], quiet[1:], strict=True):
        if len(series[0].units) < MIN_STEPS or len(s.units) < MIN_STEPS:
            texts.append("")
        elif not (quiet[0] and calm):
            texts.append(NO_INTERVAL_BUSY)
        else:
            iv = compare_runs([series[0]], [s], median=median, log=log, floor=floor)
            texts.append(iv.text())
    return Row(row.group, row.metric, row.values, row.numbers, row.changes, texts)


def _median(x: tuple[float, ...]) -> float | None:
    return statistics.median(x) if x else None


def _mean(x: tuple[float, ...] | list[float]) -> float | None:
    return statistics.fmean(x) if x else None


def step_rows(runs: list[Profile], th: Thresholds, quiet: list[bool] | None = None) -> list[Row]:
    """The step time and where it goes. ``quiet``: which runs ran on a machine that did not
    slow them (:func:`~gpuopt.gate.runs.disturbed`); a pair with a busy side gets no interval."""
    quiet = quiet or [True] * len(runs)
    times = [m.step_times(p) for p in runs]
    waits = [m.data_wait(p) for p in runs]
    dur = _abs_change(fmt_duration)
    median = _row(
        "steps", "step time (median)", [_median(t) for t in times], fmt_duration, _pct_change
    )
    rows = [
        _row(
            "steps", "measured steps", [float(len(t)) for t in times], _count, _abs_change(_count)
        ),
        # one run against one: the gate's floor for 1 + 1 runs (measured, unless given)
        _with_intervals(
            median, [RunValues(t) for t in times], True, True, step_floor(th, 2), quiet
        ),
        _row("steps", "step time (mean)", [_mean(t) for t in times], fmt_duration, _pct_change),
        _row(
            "steps",
            "step time (p90)",
            [num(p.steps.time_s.p90) for p in runs],
            fmt_duration,
            _pct_change,
        ),
        _row("steps", "wall time", [num(given(p.wall_s)) for p in runs], fmt_duration, dur),
    ]
    # the share the report shows (breakdown.data_wait), with check's one-run drift
    wait = _row(
        "breakdown", "data wait (share of step)", [w.mean() for w in waits], _share, _pt_change
    )
    floor = share_floor(th, 2, DATA_WAIT_DRIFT)
    rows.append(_with_intervals(wait, waits, False, False, floor, quiet))
    for key in ("h2d", "sync", "compute", "other"):
        values = [num(getattr(p.breakdown, key)) for p in runs]
        label = {"h2d": "host-to-device copies", "sync": "syncs"}.get(key, key)
        rows.append(_row("breakdown", f"{label} (share of step)", values, _share, _pt_change))
    rows.append(_outside_row(runs, th, quiet))
    return rows


def _outside_row(runs: list[Profile], th: Thresholds, quiet: list[bool]) -> Row:
    """The share of the recorder's window steps outside tensor ops at named lines (part of
    "other"), with the outside-ops gate's interval (its one-run floor): a sleep or a blocking
    read the step gained."""
    named = [m.outside_ops_named(p) for p in runs]
    row = _row("breakdown", "outside tensor ops, named (share of step)", named, _share, _pt_change)
    floor = share_floor(th, 2, OUTSIDE_OPS_DRIFT)  # one run against one
    first = named[0]
    texts = [
        ""
        if first is None or v is None
        else NO_INTERVAL_BUSY
        if not (quiet[0] and calm)
        else compare_runs(
            [RunValues(value=first)], [RunValues(value=v)], median=False, log=False, floor=floor
        ).text()
        for v, calm in zip(named[1:], quiet[1:], strict=True)
    ]
    return Row(row.group, row.metric, row.values, row.numbers, row.changes, texts)


def utilization_rows(runs: list[Profile]) -> list[Row]:
    rows = []
    uses = [m.gpu_use(p) for p in runs]
    labels = sorted(set().union(*(u.keys() for u in uses)))
    for label in labels:
        values = []
        for u in uses:
            got = u.get(label)
            v = (
                None
                if got is None
                else _mean(got.values.units)
                if got.values.units
                else got.values.value
            )
            values.append(None if v is None else 1 - v)
        name = "GPU idle (share of time)" if len(labels) == 1 else f"GPU idle, {label}"
        rows.append(_row("utilization", name, values, _share, _pt_change))
    cpu = [num(p.utilization.cpu.mean) for p in runs]
    rows.append(
        _row(
            "utilization",
            "CPU busy (share of all cores)",
            [None if c is None else c / 100 for c in cpu],
            _share,
            _pt_change,
        )
    )
    other = [m.machine_load(p).other for p in runs]
    rows.append(
        _row("utilization", "other processes' busy cores", other, _count, _abs_change(_count))
    )
    return rows


def counter_rows(runs: list[Profile]) -> list[Row]:
    counts = [m.counters(p) for p in runs]
    names = list(dict.fromkeys(n for c in counts for n in c))
    rows = []
    for name in names:
        values = [c[name].value if name in c else None for c in counts]
        if "bytes" in name:
            fmt: Callable[[float | None], str] = fmt_bytes
            change = _abs_change(fmt_bytes)
        else:
            fmt, change = _count, _abs_change(lambda d: f"{d:.3g}")
        rows.append(_row("counters", name, values, fmt, change))
    return rows


def _findings_by_key(p: Profile) -> dict[tuple[str, str | None], Finding]:
    return {(f.id, f.site): f for f in p.findings}


def _label(f: Finding) -> str:
    """``medium`` or ``medium (borderline)``."""
    return f.severity + (" (borderline)" if f.borderline is True else "")


def _changed(a: Finding, b: Finding) -> str:
    parts = []
    if a.severity != b.severity:
        parts.append(f"severity {_label(a)} → {_label(b)}")
    ea, eb = num(a.est_speedup), num(b.est_speedup)
    if ea is not None and eb is not None and abs(ea - eb) >= 0.01:
        parts.append(f"estimate {ea:.2f}× → {eb:.2f}×")
    if a.title != b.title and not parts:
        parts.append("title changed")
    return "; ".join(parts)


def finding_changes(a: Profile, b: Profile) -> list[FindingChange]:
    """Findings of ``b`` against ``a``: matched by (id, site); an id whose one site moved is
    "moved", not gone and new."""
    fa, fb = _findings_by_key(a), _findings_by_key(b)
    gone = [k for k in fa if k not in fb]
    new = [k for k in fb if k not in fa]
    out: list[FindingChange] = []
    for fid in sorted({k[0] for k in gone} & {k[0] for k in new}):
        g = [k for k in gone if k[0] == fid]
        n = [k for k in new if k[0] == fid]
        if len(g) == 1 and len(n) == 1:
            before, after = fa[g[0]], fb[n[0]]
            detail = f"from {g[0][1]}" + (
                f"; {_changed(before, after)}" if _changed(before, after) else ""
            )
            out.append(
                FindingChange(
                    "moved", fid, after.site, before.severity, after.severity, after.title, detail
                )
            )
            gone.remove(g[0])
            new.remove(n[0])
    for k in new:
        f = fb[k]
        out.append(FindingChange("new", f.id, f.site, "", f.severity, f.title))
    for k in gone:
        f = fa[k]
        out.append(FindingChange("gone", f.id, f.site, f.severity, "", f.title))
    for k in fa.keys() & fb.keys():
        detail = _changed(fa[k], fb[k])
        if detail:
            f = fb[k]
            out.append(
                FindingChange("changed", f.id, f.site, fa[k].severity, f.severity, f.title, detail)
            )
    order = {"new": 0, "changed": 1, "moved": 2, "gone": 3}
    severity = {"high": 0, "medium": 1, "low": 2, "": 3}
    return sorted(out, key=lambda c: (order[c.status], severity[c.after or c.before], c.id))


def _rank_values(p: Profile) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for r in p.ranks or []:
        row = out.setdefault(f"rank {r.rank}", {})
        row["step"] = num(given(r.step_time_median_s))
        row["wait"] = num(r.breakdown.data_wait) if r.breakdown else None
        row["collective"] = num(r.collective_s_per_step)
    for g in p.gpu or []:
        out.setdefault(f"rank {g.rank}", {})["idle"] = (
            None if num(g.idle_pct) is None else float(g.idle_pct or 0) / 100
        )
    return out


def rank_rows(runs: list[Profile]) -> list[Row]:
    """A row per rank and measure, for runs with more than one rank."""
    per_run = [_rank_values(p) for p in runs]
    if all(len(r) <= 1 for r in per_run):
        return []
    labels = sorted(set().union(*per_run), key=lambda s: int(s.split()[-1]))
    rows = []
    measures: list[
        tuple[str, str, Callable[[float | None], str], Callable[[float | None, float | None], str]]
    ] = [
        ("step", "step time (median)", fmt_duration, _pct_change),
        ("wait", "data wait (share of step)", _share, _pt_change),
        ("idle", "GPU idle (share of time)", _share, _pt_change),
        ("collective", "collectives per step", fmt_duration, _pct_change),
    ]
    for label in labels:
        for key, name, fmt, change in measures:
            values = [r.get(label, {}).get(key) for r in per_run]
            if any(v is not None for v in values):
                rows.append(_row(label, name, values, fmt, change))
    return rows


def _kernels_per_step(p: Profile) -> tuple[dict[str, float], dict[str, float]]:
    """``(kernel name → µs per step, kernel type → µs per step)`` over a trace's ranks (means)."""
    trace = given(p.trace)
    ranks = given(trace.ranks) if trace is not None else None
    kernels: dict[str, float] = {}
    types: dict[str, float] = {}
    for r in ranks or []:
        steps = max(len(r.profiler_steps), 1) * len(ranks or [])
        for k in r.top_kernels:
            kernels[k.name] = kernels.get(k.name, 0.0) + k.total_us / steps
        for t, us in r.kernel_types_us.items():
            types[t] = types.get(t, 0.0) + us / steps
    return kernels, types


def kernel_rows(runs: list[Profile]) -> list[Row]:
    """Time per step of each kernel type, then the kernels whose time per step changed most
    (from each trace's top kernels of each type: "–" where a kernel is not among a run's)."""
    got = [_kernels_per_step(p) for p in runs]
    if not any(k or t for k, t in got):
        return []
    us = _abs_change(fmt_us)
    rows = []
    for t in sorted(set().union(*(t.keys() for _, t in got))):
        rows.append(_row("kernel types", t, [g[1].get(t) for g in got], fmt_us, us))
    names = set().union(*(k.keys() for k, _ in got))

    def moved(name: str) -> float:
        vals = [g[0].get(name) for g in got]
        first = vals[0] or 0.0
        return max(abs((v or 0.0) - first) for v in vals[1:]) if len(vals) > 1 else 0.0

    for name in sorted(names, key=lambda n: (-moved(n), n))[:KERNEL_ROWS]:
        rows.append(_row("kernels", name, [g[0].get(name) for g in got], fmt_us, us))
    return rows


def _info(path: str, p: Profile) -> RunInfo:
    ranks = len(p.ranks or []) or len(p.gpu or []) or 1
    return RunInfo(
        path, p.script, p.source, p.environment.device, p.status, len(m.step_times(p)), ranks
    )


def _busy_note(paths: list[str], runs: list[Profile], quiet: list[bool]) -> str:
    """Which runs ran on a busy machine, and why their timed rows have no interval."""
    busy = [
        busy_text(Run(Path(path), p))
        for path, p, calm in zip(paths, runs, quiet, strict=True)
        if not calm
    ]
    return (
        "no interval for step time, data wait and time outside ops where a side ran on a busy "
        "machine: " + "; ".join(busy) + ". There identical runs differ by more than the drift an "
        "interval assumes (the same step 1.4-3.4x slower on this project's 2-core machine; "
        "`gpuopt check` calls such a side inconclusive): run both on a quiet machine"
    )


def compare(paths: list[str], runs: list[Profile], th: Thresholds | None = None) -> Comparison:
    th = th or Thresholds()
    notes = []
    if any(len(m.step_times(p)) < MIN_STEPS for p in runs):
        notes.append(
            f"no interval where a run has fewer than {MIN_STEPS} measured steps (too few to judge)"
        )
    quiet = [not disturbed(m.machine_load(p)) for p in runs]
    if not all(quiet):
        notes.append(_busy_note(paths, runs, quiet))
    kernels = kernel_rows(runs)
    if any(r.group == "kernels" and MISSING in r.values for r in kernels):
        notes.append("kernels: – where a kernel is not among that trace's top kernels of its type")
    rows = [*step_rows(runs, th, quiet), *utilization_rows(runs), *counter_rows(runs)]
    return Comparison(
        runs=[_info(path, p) for path, p in zip(paths, runs, strict=True)],
        rows=[r for r in rows if any(x is not None for x in r.numbers)],
        findings=[finding_changes(runs[0], p) for p in runs[1:]],
        ranks=rank_rows(runs),
        kernels=kernels,
        notes=notes,
    )
