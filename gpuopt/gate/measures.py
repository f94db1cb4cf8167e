"""What ``gpuopt check`` and ``gpuopt compare`` read from one Profile: pure functions.

* per-step values (the statistics' raw material): measured step times, the data-wait share;
* GPU utilization per rank (a trace's ``gpu[]``) or per GPU (NVML's samples);
* the exact per-step counters and the sites they come from;
* the machine's load while the run ran (other processes' busy cores).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuopt.gate.noise import RunValues
from gpuopt.model.profile import Finding, Profile, StepRecord
from gpuopt.model.records import given
from gpuopt.units import num

SYNCS = "syncs per step"
OPS = "ops per step"
H2D_COPIES = "host-to-device copies per step"
H2D_BYTES = "host-to-device bytes per step"
PAGEABLE = "pageable copies per step"
LOOPS = "loops issuing small ops"
# the gate id of each counter (JSON ``id``, JUnit test names)
COUNTER_IDS = {
    SYNCS: "syncs_per_step",
    OPS: "ops_per_step",
    H2D_COPIES: "h2d_copies_per_step",
    H2D_BYTES: "h2d_bytes_per_step",
    PAGEABLE: "pageable_copies_per_step",
    LOOPS: "loops",
}


def measured(p: Profile) -> list[StepRecord]:
    """The steps the statistics use: not warm-up, not slowed by the recorder, with a time."""
    skip = set(given(p.steps.instrumented) or [])
    return [
        r
        for r in p.steps.series
        if not r.warmup and r.index not in skip and r.time_s and r.time_s > 0
    ]


def outside_ops_named(p: Profile) -> float | None:
    """The share of the recorder's window steps spent outside tensor ops at lines the gap
    sampler named (a sleep, a blocking read, Python work that issues no op; data, sync and
    collective waits left out); None for a run without a recorder window. Where the document
    has it by step, the steps' median: a regression is in every step, a stall in one step (a
    collection, the process descheduled) is not, and the window's steps, stretched by the
    recorder (index_loops: 143 ms a step for 6.5 ms without it), gather such stalls against a
    step time the recorder's cost is taken out of."""
    d = p.dispatch
    if given(d.outside_ops_us_per_step) is None:
        return None
    named, step = num(given(d.outside_ops_named_us_per_step)), num(given(d.step_time_us))
    steps = given(d.outside_ops_named_us_steps)
    if steps and step:
        return min(statistics.median(steps) / step, 1.0)
    if named is not None and step:
        return min(named / step, 1.0)  # the named time's mean (documents without it by step)
    return min(sum(float(s.time_share) for s in given(d.outside_ops_sites) or []), 1.0)


def outside_ops_against_baseline(
    base: Sequence[Profile], cand: Sequence[Profile]
) -> tuple[list[float], list[float], float]:
    """Each run's named time outside tensor ops (:func:`outside_ops_named` times its window's
    step) as a share of the **baseline's** median measured step (no recorder), and that step in
    seconds; where a run lacks the window's step or the baseline its measured steps, each run's
    share of its own steps, and 0.0. A time against one yardstick: a planted sleep is a fixed
    time, and the machine's drift of the candidate's step (1.2-1.9x in quiet vae runs,
    bench_check) diluted its share of the candidate's own step to ~12pt; nor does an op-side
    speed-up raise it."""
    runs = [
        [(outside_ops_named(p), num(given(p.dispatch.step_time_us)) or 0.0) for p in side]
        for side in (base, cand)
    ]
    medians = [statistics.median(t) for t in map(step_times, base) if t]
    yardstick = statistics.median(medians) if medians else 0.0
    named = [[v * step for v, step in side if v is not None and step] for side in runs]
    every_run_timed = all(len(n) == len(side) for n, side in zip(named, runs, strict=True))
    if yardstick <= 0 or not every_run_timed:
        a, b = ([v for v, _ in side if v is not None] for side in runs)
        return a, b, 0.0
    a, b = ([min(v / (yardstick * 1e6), 1.0) for v in side] for side in named)
    return a, b, yardstick


def outside_ops_site(p: Profile) -> str | None:
    """The line most of that time went to, with the frame running there, as the gap sampler saw
    it (None where it named none)."""
    sites = given(p.dispatch.outside_ops_sites)
    if not sites:
        return None
    top = max(sites, key=lambda s: s.time_us_per_step)
    return top.site if top.frame in ("", top.site) else f"{top.site} ({top.frame})"


def step_times(p: Profile) -> tuple[float, ...]:
    return tuple(float(r.time_s) for r in measured(p))


def data_wait(p: Profile) -> RunValues:
    """The run's data-wait share, one number wherever it is shown: its measured steps' wait
    over their time, as the report's ``breakdown.data_wait``. Its units are the steps' shares
    weighted by their times, so that a resample's value is computed the same way (a mean of
    the shares would weigh a 0.1 s step like a 0.4 s one: 30.8% for a run at 21.2%)."""
    units: list[float] = []
    weights: list[float] = []
    for r in measured(p):
        if isinstance(r.data_wait_s, (int, float)):
            units.append(min(max(float(r.data_wait_s) / float(r.time_s), 0.0), 1.0))
            weights.append(float(r.time_s))
    return RunValues(units=tuple(units), weights=tuple(weights))


@dataclass(frozen=True)
class GpuUse:
    """One GPU's utilization in one run: a fraction of time with work on it."""

    label: str  # "rank 0" (a trace's rank) or "GPU 0" (an NVML device)
    values: RunValues
    source: str  # "trace" or "NVML samples"


def gpu_use(p: Profile) -> dict[str, GpuUse]:
    """Per GPU from NVML's samples in a profiled run (the whole run; with one GPU the samples
    themselves are the run's units), else per rank from a trace (``gpu[].utilization``; a run's
    profiler window, when NVML did not sample)."""
    out = _nvml_use(p) if p.source == "run" else {}
    if out:
        return out
    for g in p.gpu or []:
        util = num(g.utilization)
        if util is not None:
            label = f"rank {g.rank}"
            out[label] = GpuUse(label, RunValues(value=util), "trace")
    return out


def _nvml_use(p: Profile) -> dict[str, GpuUse]:
    out: dict[str, GpuUse] = {}
    gpus = given(p.utilization.gpus) or []
    timeline = p.utilization.timeline
    samples = [v / 100 for v in (timeline.gpu or []) if v is not None] if timeline else []
    for sampled in gpus:
        mean = num(sampled.util_mean)
        if mean is None:
            continue
        label = f"GPU {sampled.index}"
        units = tuple(samples) if len(gpus) == 1 and samples else ()
        out[label] = GpuUse(label, RunValues(units=units, value=mean / 100), "NVML samples")
    if not out and p.utilization.gpu is not None and num(p.utilization.gpu.mean) is not None:
        mean = float(p.utilization.gpu.mean or 0.0) / 100
        out["GPU"] = GpuUse("GPU", RunValues(units=tuple(samples), value=mean), "NVML samples")
    return out


@dataclass(frozen=True)
class Counter:
    """An exact per-step count and where it comes from (site → count per step)."""

    value: float
    sites: dict[str, float] = field(default_factory=dict)


def _by_site(pairs: list[tuple[str | None, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for site, n in pairs:
        if site:
            out[site] = out.get(site, 0.0) + float(n)
    return out


def counters(p: Profile) -> dict[str, Counter]:
    """The exact per-step counters of a run (the recorder's window, or a trace's events); absent
    ones left out. A trace has no Python loops: ``loops issuing small ops`` is a run's only."""
    out: dict[str, Counter] = {}
    recorded = p.dispatch.ops_per_step is not None
    if p.syncs or recorded:
        pairs = [(s.site, float(s.count_per_step)) for s in p.syncs]
        out[SYNCS] = Counter(sum(n for _, n in pairs), _by_site(pairs))
    if recorded:
        top = given(p.dispatch.top_sites) or []
        sites = _by_site([(t.site, float(t.ops_per_step)) for t in top])
        out[OPS] = Counter(float(p.dispatch.ops_per_step or 0), sites)
    h2d = [t for t in p.transfers if t.direction == "h2d"]
    if h2d or recorded:
        out[H2D_COPIES] = Counter(
            sum(float(t.count_per_step) for t in h2d),
            _by_site([(t.site, float(t.count_per_step)) for t in h2d]),
        )
        out[H2D_BYTES] = Counter(
            sum(float(t.bytes_per_step) for t in h2d),
            _by_site([(t.site, float(t.bytes_per_step)) for t in h2d]),
        )
        pageable = [t for t in h2d if t.pinned is False]
        out[PAGEABLE] = Counter(
            sum(float(t.count_per_step) for t in pageable),
            _by_site([(t.site, float(t.count_per_step)) for t in pageable]),
        )
    if recorded and p.source != "trace":
        out[LOOPS] = Counter(float(len(p.loops)), {lp.site: 1.0 for lp in p.loops})
    return out


def grown_site(before: dict[str, float], after: dict[str, float]) -> str | None:
    """The site whose count grew most from ``before`` to ``after`` (a new site counts whole)."""
    grown = [(after[s] - before.get(s, 0.0), s) for s in after]
    grown = [(d, s) for d, s in grown if d > 1e-9]
    return max(grown)[1] if grown else None


def high_findings(p: Profile) -> dict[str, Finding]:
    """Severity-high findings by id (the first of an id, in the document's ranked order)."""
    out: dict[str, Finding] = {}
    for f in p.findings:
        if f.severity == "high":
            out.setdefault(f.id, f)
    return out


@dataclass(frozen=True)
class Load:
    """Cores busy while the run ran: its own process tree's and other processes' (means over the
    run's samples), of ``cpu_count``."""

    own: float | None
    other: float | None
    cpu_count: int | None
    # the share of the run's threads' runnable time spent waiting for a core (None: unmeasured)
    run_delay: float | None = None
    threads: int | None = None  # torch's intra-op threads (None: not recorded)


def machine_load(p: Profile) -> Load:
    cpu = p.utilization.cpu
    count = given(p.utilization.cpu_count) or p.environment.cpu_count
    return Load(
        num(given(cpu.cores_busy_mean)),
        num(given(cpu.other_cores_busy_mean)),
        count,
        num(given(cpu.run_delay_share)),
        given(p.environment.torch_threads),
    )
