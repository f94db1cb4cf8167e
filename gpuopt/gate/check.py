"""What ``gpuopt check`` gates, as pure functions over two Profiles (docs/check.md).

* **Step time**: the ratio of the median measured step times, with a bootstrap interval over
  both runs' per-step times; a regression only when the whole interval lies beyond the threshold.
* **Data wait**: the per-step share of the step spent in ``next(loader)``, compared as a
  difference of means (points) with its interval.
* **GPU idle**: one value per run (NVML's mean utilization, or the traces' idle share), no
  interval: an increase beyond the threshold fails.
* **Exact counters** (no noise: counted, not timed): syncs, ops, host-to-device copies and bytes,
  pageable copies per step, Python loops issuing small ops; any increase fails.
* **New HIGH findings**: a finding id at severity high in the candidate that the baseline did not
  have, unless allowed.

Too few measured steps for an interval makes that gate "inconclusive".
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

from gpuopt.errors import GpuoptError
from gpuopt.gate.intervals import LEVEL, difference_of_means, ratio_of_medians
from gpuopt.model.profile import Profile, StepRecord
from gpuopt.model.records import given
from gpuopt.units import fmt_bytes, fmt_duration

MIN_STEPS = 8  # per run, for an interval


@dataclass(frozen=True)
class Thresholds:
    max_step_time_regression: float = 0.05  # a fraction: 5%
    max_data_wait_increase: float = 0.03  # points of the step: 3pt
    max_gpu_idle_increase: float = 0.03
    allow: frozenset[str] = field(default_factory=frozenset)


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


def parse_fraction(text: str, unit: str) -> float:
    """``"5%"`` → 0.05 (unit ``%``), ``"3pt"`` → 0.03 (unit ``pt``); a bare number is in the
    unit. A one-line GpuoptError for anything else."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(%|pt)?\s*", text)
    if m is None or (m.group(2) and m.group(2) != unit):
        raise GpuoptError(f"{text!r}: expected a number of {unit}, e.g. 5{unit}")
    return float(m.group(1)) / 100


def _measured(p: Profile) -> list[StepRecord]:
    """The steps the statistics use: not warm-up, not slowed by the recorder, with a time."""
    skip = set(given(p.steps.instrumented) or [])
    return [
        r
        for r in p.steps.series
        if not r.warmup and r.index not in skip and r.time_s and r.time_s > 0
    ]


def measured_times(p: Profile) -> list[float]:
    return [float(r.time_s) for r in _measured(p)]


def data_wait_shares(p: Profile) -> list[float]:
    return [
        min(max(float(r.data_wait_s) / float(r.time_s), 0.0), 1.0)
        for r in _measured(p)
        if isinstance(r.data_wait_s, (int, float))
    ]


def counters(p: Profile) -> dict[str, float]:
    """The exact per-step counters of a run (recorder window; absent ones left out)."""
    out: dict[str, float] = {}
    if p.syncs or p.dispatch.ops_per_step is not None:
        out["syncs per step"] = float(sum(s.count_per_step for s in p.syncs))
    if p.dispatch.ops_per_step is not None:
        out["ops per step"] = float(p.dispatch.ops_per_step)
    h2d = [t for t in p.transfers if t.direction == "h2d"]
    if h2d or p.dispatch.ops_per_step is not None:
        out["host-to-device copies per step"] = float(sum(t.count_per_step for t in h2d))
        out["host-to-device bytes per step"] = float(sum(t.bytes_per_step for t in h2d))
        out["pageable copies per step"] = float(
            sum(t.count_per_step for t in h2d if t.pinned is False)
        )
    if p.dispatch.ops_per_step is not None:
        out["loops issuing small ops"] = float(len(p.loops))
    return out


def _pct(x: float) -> str:
    return f"{x:+.1%}"


def step_time_gate(base: Profile, cand: Profile, th: Thresholds) -> Gate:
    a, b = measured_times(base), measured_times(cand)
    if not a or not b:
        return Gate("step time (median)", "not measured", "–", "–", "–", "no measured steps")
    ma, mb = statistics.median(a), statistics.median(b)
    shown = (fmt_duration(ma), fmt_duration(mb))
    if len(a) < MIN_STEPS or len(b) < MIN_STEPS:
        why = f"{len(a)} and {len(b)} measured steps: at least {MIN_STEPS} each are needed"
        return Gate("step time (median)", "inconclusive", *shown, _pct(mb / ma - 1), why)
    ratio, low, high = ratio_of_medians(a, b)
    limit = 1 + th.max_step_time_regression
    verdict = "fail" if low > limit else "pass"
    detail = (
        f"{LEVEL:.0%} interval {_pct(low - 1)} … {_pct(high - 1)}; "
        f"threshold {_pct(th.max_step_time_regression)}"
    )
    return Gate("step time (median)", verdict, *shown, _pct(ratio - 1), detail)


def data_wait_gate(base: Profile, cand: Profile, th: Thresholds) -> Gate:
    a, b = data_wait_shares(base), data_wait_shares(cand)
    name = "data wait (share of step)"
    if not a or not b:
        return Gate(name, "not measured", "–", "–", "–", "no per-step data wait")
    shown = (f"{sum(a) / len(a):.1%}", f"{sum(b) / len(b):.1%}")
    diff, low, high = difference_of_means(a, b)
    change = f"{diff * 100:+.1f}pt"
    if len(a) < MIN_STEPS or len(b) < MIN_STEPS:
        return Gate(name, "inconclusive", *shown, change, f"fewer than {MIN_STEPS} steps")
    verdict = "fail" if low > th.max_data_wait_increase else "pass"
    detail = (
        f"{LEVEL:.0%} interval {low * 100:+.1f} … {high * 100:+.1f}pt; "
        f"threshold +{th.max_data_wait_increase * 100:.1f}pt"
    )
    return Gate(name, verdict, *shown, change, detail)


def _gpu_idle(p: Profile) -> float | None:
    """The run's GPU idle share: the traces' mean idle over ranks, else 1 − NVML's mean."""
    if p.gpu:
        idle = [g.idle_pct for g in p.gpu if g.idle_pct is not None]
        if idle:
            return sum(idle) / len(idle) / 100
    mean = p.utilization.gpu.mean if p.utilization.gpu is not None else None
    return 1 - float(mean) / 100 if mean is not None else None


def gpu_idle_gate(base: Profile, cand: Profile, th: Thresholds) -> Gate:
    a, b = _gpu_idle(base), _gpu_idle(cand)
    name = "GPU idle (share of time)"
    if a is None or b is None:
        return Gate(name, "not measured", "–", "–", "–", "no GPU measured in one of the runs")
    verdict = "fail" if b - a > th.max_gpu_idle_increase else "pass"
    detail = f"one value per run, no interval; threshold +{th.max_gpu_idle_increase * 100:.1f}pt"
    return Gate(name, verdict, f"{a:.1%}", f"{b:.1%}", f"{(b - a) * 100:+.1f}pt", detail)


def counter_gates(base: Profile, cand: Profile) -> list[Gate]:
    a, b = counters(base), counters(cand)
    out = []
    for name in a.keys() & b.keys():
        before, after = a[name], b[name]
        verdict = "fail" if after > before + 1e-9 else "pass"
        if "bytes" in name:
            sign = "+" if after >= before else "-"
            shown = (fmt_bytes(before), fmt_bytes(after), sign + fmt_bytes(abs(after - before)))
        else:
            shown = (f"{before:.6g}", f"{after:.6g}", f"{after - before:+.3g}")
        out.append(Gate(name, verdict, *shown))
    order = list(a)
    return sorted(out, key=lambda g: order.index(g.metric))


def finding_gates(base: Profile, cand: Profile, th: Thresholds) -> list[Gate]:
    before = {f.id for f in base.findings if f.severity == "high"}
    out = []
    for f in cand.findings:
        if f.severity != "high" or f.id in before:
            continue
        allowed = f.id in th.allow
        out.append(
            Gate(
                f"new HIGH finding {f.id}",
                "pass" if allowed else "fail",
                "absent",
                "high",
                "new",
                ("allowed (--allow); " if allowed else "") + f.title,
                f.site,
            )
        )
    return out


def evaluate(base: Profile, cand: Profile, th: Thresholds) -> list[Gate]:
    return [
        step_time_gate(base, cand, th),
        data_wait_gate(base, cand, th),
        gpu_idle_gate(base, cand, th),
        *counter_gates(base, cand),
        *finding_gates(base, cand, th),
    ]


def exit_code(gates: list[Gate], strict: bool) -> int:
    """0 pass, 1 a regression (or, with ``strict``, an inconclusive gate)."""
    if any(g.verdict == "fail" for g in gates):
        return 1
    if strict and any(g.verdict == "inconclusive" for g in gates):
        return 1
    return 0
