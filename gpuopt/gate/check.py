"""What ``gpuopt check`` gates, as pure functions over the two sides' Profiles (docs/check.md).

Each side is one run or several runs of the same code (repeats). The timed gates compare the
sides with an interval that covers within-run variation and run-to-run drift
(:mod:`gpuopt.gate.noise`) and fail only when the whole interval lies beyond the threshold:

* **step time**: the ratio of the median measured step times;
* **data wait**: the per-step share of the step spent in ``next(loader)``, a difference in
  points;
* **GPU idle**, per rank (a trace) or per GPU (NVML's samples): a difference in points;
  ``min_gpu_util`` also bounds the candidate's utilization from below.

The exact counters (counted, not timed: syncs, ops, host-to-device copies and bytes, pageable
copies per step, Python loops issuing small ops) fail on any increase; a HIGH finding the
baseline did not have fails unless allowed. Too few measured steps makes a timed gate
"inconclusive", as does a side that ran on a busy machine while the other did not.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuopt.errors import GpuoptError
from gpuopt.gate import measures as m
from gpuopt.gate.noise import Interval, RunValues, compare_runs, one_side
from gpuopt.model.profile import EvidenceInterval, Finding, Profile
from gpuopt.model.records import given
from gpuopt.units import fmt_bytes, fmt_duration

MIN_STEPS = 8  # measured steps per side, for an interval
# Below this median step time, run-to-run drift dwarfs the default floor: 20 runs of
# examples/sync_metrics.py (0.25 ms steps) had medians with a 6.6% standard deviation and a heavy
# tail (291 and 316 µs among ~250): identical code fails 1 of 10 pairs at one run a side and 1 of
# 10 at 2 + 1 (the drift then measured from one pair of runs); at 2 + 2, 0 of 10. The 25 ms steps
# of slow_dataset.py: 0.4%
SHORT_STEP_S = 1e-3
# With one run a side the run-to-run drift cannot be estimated from the runs; unless the user
# gave theirs (--step-time-noise, or the config), the interval uses the drift of this kind of
# machine: the largest standard deviation of the log median step time over quiet identical runs
# of the bundled examples and corpus scripts (steps of 1 ms or more) on the project's 2-core VM.
# benchmarks/bench_stability.py's step-time sd: 1.6-28.5% by script, the most for
# examples/ragged_steps.py (docs/benchmarks.md); rounded up to 30%.
ONE_RUN_DRIFT = 0.30
# the gates a check can run (``--gates``): timed ones, then those counted exactly
GATE_GROUPS = ("step-time", "data-wait", "outside-ops", "gpu", "counters", "findings")
# The run-to-run drift (sd) of the share of a step outside tensor ops named at a line, over quiet
# identical runs, the floor of the outside-ops gate with fewer than three runs in all.
# benchmarks/bench_stability.py's "named" column: at most 2.0pt over 20 runs each of 5 scripts,
# a tail of single spikes (index_loops: 0 in most runs, 7.4% in one). 3pt, as the data-wait
# gate's: a 7.4pt rise at one run a side stays within noise, a planted sleep of a quarter of the
# step does not.
OUTSIDE_OPS_DRIFT = 0.03
# The run-to-run drift (sd) of a run's mean data-wait share over quiet identical runs, the floor of
# the data-wait gate with fewer than three runs in all: bench_stability's evidence sd of
# `dataloader-bound`, 1.6-2.7pt (slow_dataset, io_loader, corpus vae; 20 runs each), rounded up:
# with a 1pt floor an identical vae pair fails at one run a side (bench_check).
DATA_WAIT_DRIFT = 0.03


@dataclass(frozen=True)
class Thresholds:
    max_step_time_regression: float = 0.05  # a fraction: 5%
    max_data_wait_increase: float = 0.03  # points of the step: 3pt
    max_outside_ops_increase: float = 0.05  # points of the step: 5pt
    max_gpu_idle_increase: float = 0.03
    min_gpu_util: float | None = None  # a fraction: 0.6 is 60%
    step_time_noise: float = 0.01  # the least run-to-run drift of step time (1%)
    share_noise: float = 0.01  # ... of a share (data wait, GPU idle): 1pt
    # --step-time-noise came from the user (a flag or the config): their machine's measured drift
    step_time_noise_given: bool = False
    allow: frozenset[str] = field(default_factory=frozenset)
    gates: frozenset[str] = frozenset(GATE_GROUPS)


def parse_gates(text: str) -> frozenset[str]:
    """``"counters,findings"`` → those groups; a one-line GpuoptError for an unknown one."""
    names = frozenset(x.strip() for x in text.split(",") if x.strip())
    unknown = sorted(names - set(GATE_GROUPS))
    if unknown or not names:
        raise GpuoptError(f"{text!r}: gates are a comma-separated list of {', '.join(GATE_GROUPS)}")
    return names


@dataclass(frozen=True)
class Bounds:
    """A timed gate's interval: ``scale`` "ratio" (1.05 is 5% slower), "points" (a difference
    of shares, 0.02 is +2pt) or "share" (one side's share, for a lower bound)."""

    estimate: float
    low: float
    high: float
    level: float
    scale: str
    covers: str


@dataclass(frozen=True)
class Gate:
    """One gated metric: its verdict and what it compared."""

    metric: str
    verdict: str  # pass | fail | inconclusive | not measured
    baseline: str
    candidate: str
    change: str
    detail: str = ""
    site: str | None = None
    # gpuopt.check/1 additions
    id: str = ""  # stable name: step_time, data_wait, gpu_idle, gpu_util, syncs_per_step, ...
    rank: str | None = None  # "rank 1" (a trace) or "GPU 0" (NVML) for per-rank gates
    threshold: str = ""
    interval: Bounds | None = None


def parse_fraction(text: str, unit: str) -> float:
    """``"5%"`` → 0.05 (unit ``%``), ``"3pt"`` → 0.03 (unit ``pt``); a bare number is in the
    unit. A one-line GpuoptError for anything else."""
    m_ = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(%|pt)?\s*", text)
    if m_ is None or (m_.group(2) and m_.group(2) != unit):
        raise GpuoptError(f"{text!r}: expected a number of {unit}, e.g. 5{unit}")
    return float(m_.group(1)) / 100


def _pct(x: float) -> str:
    return f"{x:+.1%}"


def _pt(x: float) -> str:
    return f"{x * 100:+.1f}pt"


def _bounds(iv: Interval, scale: str) -> Bounds:
    return Bounds(iv.estimate, iv.low, iv.high, iv.level, scale, iv.covers())


def _runs(profiles: Sequence[Profile] | Profile) -> list[Profile]:
    return [profiles] if isinstance(profiles, Profile) else list(profiles)


def _not_judged(
    a: list[tuple[float, ...]], b: list[tuple[float, ...]], busy: str | None
) -> str | None:
    """Why a per-step gate cannot judge: too few measured steps on a side, else ``busy``."""
    na, nb = sum(map(len, a)), sum(map(len, b))
    if na < MIN_STEPS or nb < MIN_STEPS:
        return f"{na} and {nb} measured steps: at least {MIN_STEPS} on each side are needed"
    return busy


def _short_steps(ma: float, mb: float, runs: int, th: Thresholds) -> str | None:
    """Why sub-millisecond steps are not judged: fewer than two runs on a side (``runs``: the
    smaller side's count) on the default floor (a larger ``--step-time-noise`` is judged)."""
    if min(ma, mb) >= SHORT_STEP_S or runs >= 2:
        return None
    if th.step_time_noise > Thresholds().step_time_noise:
        return None
    return (
        f"steps of {fmt_duration(min(ma, mb))} drift more between runs than the "
        f"{th.step_time_noise:.0%} floor assumes (6.6% sd measured on 0.25 ms steps): give two "
        "runs a side (repeat CANDIDATE and --baseline) or a larger --step-time-noise"
    )


def step_floor(th: Thresholds, runs: int) -> float:
    """The least run-to-run drift of step time for ``runs`` runs in all: the user's
    (``--step-time-noise`` given), else with fewer than three runs, where the runs cannot
    estimate it, :data:`ONE_RUN_DRIFT` (the drift assumed for one run a side), else the
    default."""
    if th.step_time_noise_given or runs >= 3:
        return th.step_time_noise
    return max(th.step_time_noise, ONE_RUN_DRIFT)


def step_time_gate(
    base: Sequence[Profile],
    cand: Sequence[Profile],
    th: Thresholds,
    busy: str | None = None,
    explained: float | None = None,
) -> Gate:
    """The median step time's ratio. ``busy``: why the sides' timings cannot be compared (a
    side ran on a busy machine), unless the ratio lies beyond ``explained`` (the most the load
    can have slowed the candidate) times the threshold."""
    name, gid = "step time (median)", "step_time"
    threshold = _pct(th.max_step_time_regression)
    a = [t for t in map(m.step_times, base) if t]
    b = [t for t in map(m.step_times, cand) if t]
    if not a or not b:
        return Gate(name, "not measured", "–", "–", "–", "no measured steps", id=gid)
    ma = statistics.fmean(statistics.median(t) for t in a)
    mb = statistics.fmean(statistics.median(t) for t in b)
    shown = (fmt_duration(ma), fmt_duration(mb), _pct(mb / ma - 1))
    why = _not_judged(a, b, None) or _short_steps(ma, mb, min(len(a), len(b)), th)
    if why:
        return Gate(name, "inconclusive", *shown, why, id=gid, threshold=threshold)
    floor = step_floor(th, len(a) + len(b))
    iv = compare_runs(
        [RunValues(t) for t in a],
        [RunValues(t) for t in b],
        median=True,
        log=True,
        floor=floor,
    )
    limit = 1 + th.max_step_time_regression
    verdict, detail = _step_verdict(iv, limit, floor, th, busy, explained)
    return Gate(
        name,
        verdict,
        *shown[:2],
        _pct(iv.estimate - 1),
        f"{iv.text()}; threshold {threshold}{detail}",
        id=gid,
        threshold=threshold,
        interval=_bounds(iv, "ratio"),
    )


def _step_verdict(
    iv: Interval,
    limit: float,
    floor: float,
    th: Thresholds,
    busy: str | None,
    explained: float | None,
) -> tuple[str, str]:
    """``(verdict, what to add to the detail)`` of the step-time gate."""
    if busy:
        bound = limit * (explained or 1.0)
        if math.isinf(bound):
            return "inconclusive", (
                f"; {busy}, and its ops run on several threads: no ratio is beyond what the load "
                "can do to them"
            )
        if iv.low > bound:
            return "fail", (
                f"; {busy}, but the load explains at most {explained or 1.0:.2f}× and the "
                "whole interval lies beyond it"
            )
        return "inconclusive", f"; {busy}"
    if iv.low > limit:
        return "fail", ""
    if floor > th.step_time_noise and iv.estimate > limit:
        return "inconclusive", (
            f"; within the {floor:.0%} run-to-run drift assumed for one run a side "
            f"(docs/check.md#noise; 1 + 1 runs cannot measure yours): run 2+ a side (repeat "
            "CANDIDATE and --baseline), or give your machine's drift with --step-time-noise"
        )
    if iv.estimate > limit:
        # above the threshold, but not clearly: never a silent pass (bench_check, 3 runs a side:
        # a planted 25% sleep measured +5.7%, -22.9% ... +44.4%, and passed)
        return "inconclusive", (
            "; the estimate is above the threshold but its interval reaches below it: add runs "
            "a side (repeat CANDIDATE and --baseline) to tell"
        )
    return "pass", ""


def share_floor(th: Thresholds, runs: int, one_run: float) -> float:
    """The least run-to-run drift a share's interval assumes: ``--share-noise``, and with fewer
    than three runs in all (too few to measure it) at least ``one_run``, the drift that share was
    measured to have between identical runs (``DATA_WAIT_DRIFT``, ``OUTSIDE_OPS_DRIFT``)."""
    return max(th.share_noise, one_run if runs < 3 else 0.0)


def data_wait_gate(
    base: Sequence[Profile], cand: Sequence[Profile], th: Thresholds, busy: str | None = None
) -> Gate:
    name, gid = "data wait (share of step)", "data_wait"
    threshold = _pt(th.max_data_wait_increase)
    a = [v for v in map(m.data_wait, base) if v.units]
    b = [v for v in map(m.data_wait, cand) if v.units]
    if not a or not b:
        return Gate(name, "not measured", "–", "–", "–", "no per-step data wait", id=gid)
    ma = statistics.fmean(float(v.mean() or 0.0) for v in a)
    mb = statistics.fmean(float(v.mean() or 0.0) for v in b)
    shown = (f"{ma:.1%}", f"{mb:.1%}", _pt(mb - ma))
    why = _not_judged([v.units for v in a], [v.units for v in b], busy)
    if why:
        return Gate(name, "inconclusive", *shown, why, id=gid, threshold=threshold)
    iv = compare_runs(
        a,
        b,
        median=False,
        log=False,
        floor=share_floor(th, len(a) + len(b), DATA_WAIT_DRIFT),
    )
    verdict = "fail" if iv.low > th.max_data_wait_increase else "pass"
    detail = f"{iv.text()}; threshold {threshold}"
    return Gate(
        name,
        verdict,
        *shown,
        detail,
        id=gid,
        threshold=threshold,
        interval=_bounds(iv, "points"),
    )


def _yardstick_text(step_s: float) -> str:
    """What the outside-ops shares are shares of: the baseline's step, or (a document without
    the recorder window's step time) each run's own."""
    if step_s:
        return f"shares of the baseline's median step, {fmt_duration(step_s)}"
    return "shares of each run's own step (a run lacks the recorder window's step time)"


def outside_ops_gate(
    base: Sequence[Profile], cand: Sequence[Profile], th: Thresholds, busy: str | None = None
) -> Gate:
    """The time outside tensor ops that the gap sampler named at a line (a sleep, a blocking
    read, Python work that issues no op), per recorder window step, as a share of the
    **baseline's** measured step (:func:`~gpuopt.gate.measures.outside_ops_against_baseline`):
    a planted 25% sleep is a fixed time, which the machine's run-to-run drift of step time (30%
    on this project's VM) neither hides nor dilutes. Named time, not all of it: a stretch the
    sampler could not look into (the process descheduled, a collection holding the GIL) stays
    unnamed, and in identical runs the unnamed part reaches 24-34% of a window where most runs
    read 0 (bench_stability). Its drift floor with fewer than three runs in all:
    :data:`OUTSIDE_OPS_DRIFT`, and the baseline's named time times the step's one-run drift (the
    named time of Python work slows with the machine); the data's own with more. The
    candidate's line where the time went is named. A busy side leaves it inconclusive."""
    name, gid = "time outside tensor ops (share of step)", "outside_ops"
    threshold = _pt(th.max_outside_ops_increase)
    a, b, yardstick = m.outside_ops_against_baseline(base, cand)
    if not a or not b:
        return Gate(name, "not measured", "–", "–", "–", "no recorder window", id=gid)
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    shown = (f"{ma:.1%}", f"{mb:.1%}", _pt(mb - ma))
    runs = len(a) + len(b)
    floor = share_floor(th, runs, OUTSIDE_OPS_DRIFT)
    if yardstick:  # a time drifts with the machine as the step does: the baseline's, scaled
        floor = math.hypot(floor, step_floor(th, runs) * ma)
    iv = compare_runs(
        [RunValues(value=v) for v in a],
        [RunValues(value=v) for v in b],
        median=False,
        log=False,
        floor=floor,
    )
    verdict = "fail" if iv.low > th.max_outside_ops_increase else "pass"
    detail = f"{iv.text()}; threshold {threshold}; {_yardstick_text(yardstick)}"
    if busy:  # a loaded machine moved it (+45pt in an identical pair under two spinning
        # neighbours, its threads waiting 40% of their time): the step-time gate's bound judges
        verdict, detail = "inconclusive", busy
    site = next(filter(None, (m.outside_ops_site(p) for p in cand)), None)
    if verdict == "fail" and site:
        detail = f"the candidate's time outside ops went to {site}; {detail}"
    return Gate(
        name, verdict, *shown, detail, id=gid, threshold=threshold, interval=_bounds(iv, "points")
    )


def _idle(v: RunValues) -> RunValues:
    value = None if v.value is None else 1 - v.value
    return RunValues(units=tuple(1 - u for u in v.units), value=value)


def _gpu_runs(runs: Sequence[Profile]) -> dict[str, list[m.GpuUse]]:
    out: dict[str, list[m.GpuUse]] = {}
    for p in runs:
        for label, use in m.gpu_use(p).items():
            out.setdefault(label, []).append(use)
    return out


def _side_value(runs: list[m.GpuUse]) -> float:
    vals = [statistics.fmean(u.values.units) if u.values.units else u.values.value for u in runs]
    return statistics.fmean(v for v in vals if v is not None)


def _gpu_name(what: str, label: str, labels: int) -> str:
    """``GPU idle (share of time)``; with several ranks ``GPU idle, rank 1 (share of time)``."""
    unit = "share of time" if what == "GPU idle" else "at least"
    return f"{what} ({unit})" if labels <= 1 else f"{what}, {label} ({unit})"


def gpu_idle_gates(
    base: Sequence[Profile], cand: Sequence[Profile], th: Thresholds, busy: str | None = None
) -> list[Gate]:
    a, b = _gpu_runs(base), _gpu_runs(cand)
    threshold = _pt(th.max_gpu_idle_increase)
    if not a or not b:
        detail = "no GPU measured in one of the runs"
        return [
            Gate("GPU idle (share of time)", "not measured", "–", "–", "–", detail, id="gpu_idle")
        ]
    labels = sorted(a.keys() | b.keys())
    out = []
    for label in labels:
        name = _gpu_name("GPU idle", label, len(labels))
        if label not in a or label not in b:
            side = "baseline" if label not in a else "candidate"
            detail = f"{label} not measured in the {side}"
            out.append(Gate(name, "not measured", "–", "–", "–", detail, id="gpu_idle", rank=label))
            continue
        ia, ib = 1 - _side_value(a[label]), 1 - _side_value(b[label])
        shown = (f"{ia:.1%}", f"{ib:.1%}", _pt(ib - ia))
        if busy:
            out.append(
                Gate(
                    name,
                    "inconclusive",
                    *shown,
                    busy,
                    id="gpu_idle",
                    rank=label,
                    threshold=threshold,
                )
            )
            continue
        iv = compare_runs(
            [_idle(u.values) for u in a[label]],
            [_idle(u.values) for u in b[label]],
            median=False,
            log=False,
            floor=th.share_noise,
        )
        verdict = "fail" if iv.low > th.max_gpu_idle_increase else "pass"
        detail = f"{iv.text()}; threshold {threshold}; from {a[label][0].source}"
        out.append(
            Gate(
                name,
                verdict,
                *shown,
                detail,
                id="gpu_idle",
                rank=label,
                threshold=threshold,
                interval=_bounds(iv, "points"),
            )
        )
    return out


def gpu_util_gates(cand: Sequence[Profile], th: Thresholds, busy: str | None = None) -> list[Gate]:
    """``min_gpu_util``: the candidate's GPU utilization, per rank or GPU, is at least this; it
    fails when the whole interval of its utilization lies below."""
    if th.min_gpu_util is None:
        return []
    floor = f"{th.min_gpu_util:.0%}"
    b = _gpu_runs(cand)
    if not b:
        detail = "no GPU measured in the candidate"
        return [
            Gate(
                "GPU utilization (at least)",
                "not measured",
                "–",
                "–",
                "–",
                detail,
                id="gpu_util",
                threshold=floor,
            )
        ]
    out = []
    for label in sorted(b):
        name = _gpu_name("GPU utilization", label, len(b))
        value = _side_value(b[label])
        if busy:
            out.append(
                Gate(
                    name,
                    "inconclusive",
                    floor,
                    f"{value:.1%}",
                    "–",
                    busy,
                    id="gpu_util",
                    rank=label,
                    threshold=floor,
                )
            )
            continue
        iv = one_side([u.values for u in b[label]], floor=th.share_noise)
        verdict = "fail" if iv.high < th.min_gpu_util else "pass"
        detail = (
            f"{iv.level:.0%} interval {iv.low:.1%} … {iv.high:.1%}; at least {floor}; "
            f"from {b[label][0].source}"
        )
        out.append(
            Gate(
                name,
                verdict,
                floor,
                f"{value:.1%}",
                _pt(value - th.min_gpu_util),
                detail,
                id="gpu_util",
                rank=label,
                threshold=floor,
                interval=_bounds(iv, "share"),
            )
        )
    return out


def _counter_text(name: str, before: float, after: float) -> tuple[str, str, str]:
    if "bytes" in name:
        sign = "+" if after >= before else "-"
        return fmt_bytes(before), fmt_bytes(after), sign + fmt_bytes(abs(after - before))
    return f"{before:.6g}", f"{after:.6g}", f"{after - before:+.3g}"


def counter_gates(base: Sequence[Profile], cand: Sequence[Profile]) -> list[Gate]:
    """Any increase fails. With several runs a side, the candidate's least count against the
    baseline's greatest (an exact counter that varies between runs is named as such)."""
    a = [m.counters(p) for p in base]
    b = [m.counters(p) for p in cand]
    names = [n for n in a[0] if all(n in c for c in a + b)]
    out = []
    for name in names:
        before = max(c[name].value for c in a)
        after = min(c[name].value for c in b)
        verdict = "fail" if after > before + 1e-9 else "pass"
        spread = {c[name].value for c in a} | {c[name].value for c in b}
        detail = "counted, not timed"
        varies = len({c[name].value for c in a}) > 1 or len({c[name].value for c in b}) > 1
        if varies:
            detail = (
                f"varies between runs ({min(spread):.6g} … {max(spread):.6g}): compared the "
                "candidate's least with the baseline's greatest"
            )
        site = None
        if verdict == "fail":
            sites: dict[str, float] = {}
            for c in a:
                for s, n in c[name].sites.items():
                    sites[s] = max(sites.get(s, 0.0), n)
            site = m.grown_site(sites, min((c[name] for c in b), key=lambda c: c.value).sites)
        gid = m.COUNTER_IDS.get(name, name)
        out.append(
            Gate(
                name,
                verdict,
                *_counter_text(name, before, after),
                detail,
                site,
                id=gid,
                threshold="+0",
            )
        )
    return out


def _lowest(findings: list[Finding]) -> EvidenceInterval | None:
    """The candidate side's evidence: the interval with the lowest low end (None: a run's
    finding has none)."""
    ivs = [given(f.interval) for f in findings]
    if any(iv is None for iv in ivs) or not ivs:
        return None
    return min((iv for iv in ivs if iv is not None), key=lambda iv: iv.low)


def _baseline_evidence(base: Sequence[Profile], fid: str) -> EvidenceInterval | None:
    """The baseline side's evidence for ``fid``: the interval with the highest high end, each
    run's from its finding of that id (any severity) or, without one, measured on the run
    (:func:`gpuopt.findings.evidence.measure`); None when a run has neither."""
    from gpuopt.findings.evidence import measure

    ivs: list[EvidenceInterval] = []
    for p in base:
        own = [iv for f in p.findings if f.id == fid and (iv := given(f.interval)) is not None]
        iv = max(own, key=lambda i: i.high) if own else measure(p, fid)
        if iv is None:
            return None
        ivs.append(iv)
    return max(ivs, key=lambda iv: iv.high) if ivs else None


def _baseline_label(base: Sequence[Profile], fid: str) -> str:
    """The baseline's highest severity of ``fid`` ("absent" without one), "(borderline)" when
    every finding of it there is."""
    found = [f for p in base for f in p.findings if f.id == fid]
    if not found:
        return "absent"
    order = {"high": 0, "medium": 1, "low": 2}
    top = min(found, key=lambda f: order.get(f.severity, 3))
    borderline = all(f.borderline is True for f in found)
    return top.severity + (" (borderline)" if borderline else "")


def _moved(cand: EvidenceInterval, base: EvidenceInterval) -> tuple[bool, str]:
    """Whether the evidence clearly moved up (the intervals do not overlap), in words."""
    what = cand.metric.replace("_", " ")
    text = (
        f"{what} {cand.value:.1%} ({cand.low:.1%} … {cand.high:.1%}) against the baseline's "
        f"{base.value:.1%} ({base.low:.1%} … {base.high:.1%})"
    )
    return cand.low > base.high, text


def finding_gates(
    base: Sequence[Profile], cand: Sequence[Profile], th: Thresholds, busy: str | None = None
) -> list[Gate]:
    """A finding at severity high in every candidate run and in no baseline run fails when its
    evidence clearly moved: where the finding has an evidence interval, the candidate's lowest
    low end lies above the baseline's highest high end (its findings of that id at a lower
    severity, or the evidence measured on the run); without intervals, on the label alone.
    ``busy``: a side ran only on a busy machine — evidence with an interval is a share of the
    step's time, which the load moves (a busy vae baseline's data wait fell from HIGH as its
    compute slowed 10×), so such a finding is inconclusive; labels without one still judge."""
    before: set[str] = set()
    for p in base:
        before |= m.high_findings(p).keys()
    highs = [m.high_findings(p) for p in cand]
    out = []
    for fid, f in highs[0].items():
        if fid in before or not all(fid in h for h in highs):
            continue
        verdict, detail = "fail", f.title
        cand_iv = _lowest([h[fid] for h in highs])
        base_iv = _baseline_evidence(base, fid) if cand_iv is not None else None
        if cand_iv is not None and busy:
            verdict = "inconclusive"
            detail = f"HIGH now; {busy}: its evidence is a share of the step's time"
        elif cand_iv is not None and base_iv is not None:
            moved, text = _moved(cand_iv, base_iv)
            if moved:
                detail = f"{f.title}; {text}: clearly moved"
            else:
                verdict = "pass"
                detail = f"HIGH now, but {text}: within noise, not clearly moved"
        allowed = fid in th.allow and verdict == "fail"
        out.append(
            Gate(
                f"new HIGH finding {fid}",
                "pass" if allowed else verdict,
                _baseline_label(base, fid),
                "high",
                {"fail": "new", "inconclusive": "busy machine"}.get(verdict, "in noise"),
                ("allowed (--allow); " if allowed else "") + detail,
                f.site,
                id=f"finding:{fid}",
                threshold="no new HIGH finding (evidence clearly moved)",
            )
        )
    return out


def evaluate(
    base: Sequence[Profile] | Profile,
    cand: Sequence[Profile] | Profile,
    th: Thresholds,
    *,
    timed: tuple[Sequence[Profile], Sequence[Profile]] | None = None,
    busy: str | None = None,
    explained: float | None = None,
) -> list[Gate]:
    """Every gate. ``timed``: the runs the timed gates use (the quiet ones), when not all;
    ``busy``: why the timed gates cannot judge (one side ran on a busy machine); ``explained``:
    the most that load can have slowed the candidate's step (a factor)."""
    a, b = _runs(base), _runs(cand)
    ta, tb = (list(timed[0]), list(timed[1])) if timed else (a, b)
    on = th.gates
    return [
        *([step_time_gate(ta, tb, th, busy, explained)] if "step-time" in on else []),
        *([data_wait_gate(ta, tb, th, busy)] if "data-wait" in on else []),
        *([outside_ops_gate(ta, tb, th, busy)] if "outside-ops" in on else []),
        *(gpu_idle_gates(ta, tb, th, busy) if "gpu" in on else []),
        *(gpu_util_gates(tb, th, busy) if "gpu" in on else []),
        *(counter_gates(a, b) if "counters" in on else []),
        *(finding_gates(ta, tb, th, busy) if "findings" in on else []),
    ]


def exit_code(gates: list[Gate], strict: bool) -> int:
    """0 pass, 1 a regression (or, with ``strict``, an inconclusive gate)."""
    if any(g.verdict == "fail" for g in gates):
        return 1
    if strict and any(g.verdict == "inconclusive" for g in gates):
        return 1
    return 0
