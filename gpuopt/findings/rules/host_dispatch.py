"""``launch-bound``: the step is many tiny ops, and the host's time issuing them dominates.

Each op costs the host microseconds of Python, autograd and dispatcher work plus a kernel launch.
When ops are small, the GPU finishes each kernel before the host has issued the next one and idles
in between. The recorder measures, for its window, ops per step, how long op calls take, and the
host time between ops (data loading and sync waits excluded); ``host_dispatch_share`` is between-op
time plus the time of tiny op calls, over the step.

A plausibility check keeps the finding honest: issuing one op costs the host microseconds. When
the measured host time per op is far above the calibrated cost of a trivial op call (measured at
the end of the run, ``dispatch.calibrated_op_us``: more than :data:`MAX_PER_OP_FACTOR` times it,
and at least :data:`MIN_IMPLAUSIBLE_US`), the time between ops is not dispatch (Python work
between ops, or a step that does something else) and the finding does not fire.

Time outside tensor ops (a ``time.sleep``, a blocking read, a Python loop without ops: any
stretch between two ops longer than that same bound) is not part of ``host_dispatch_share``:
counted there, a 10 ms sleep in a 23 ms step of 226 small ops reads 44 µs "per op", under the
per-op bound, and makes a HIGH finding at the next op's line. The recorder measures those
stretches and the assembly leaves them out of ``host_dispatch_share`` (``dispatch.outside_ops_*``:
"other", named at its lines). The share's interval comes from each recorded step's value
(``host_dispatch_share_steps``): a share within noise of 30% or 25% is borderline, never HIGH
(:mod:`gpuopt.findings.evidence`).

Each step's share is what is left of its tiny ops' time after the recorder's per-op cost estimate
is taken out, and where the recorder costs 20× the op that subtraction can leave nothing: in 2 of
20 identical runs of ``examples/index_loops.py`` one window step reads 0% (the others 36-54%),
the interval spans 0-100% and a HIGH finding turns into a borderline LOW one. The step's op count
gives a floor that no subtraction touches (:func:`dispatch_floor`): each tiny op costs the host at
least what the cheapest op call costs without the recorder (``calibrated_op_us``, the best of the
calibration's repeats), so the share is at least tiny ops × that over the unrecorded steps'
median (4,900 × 1.1 µs of a 7.3 ms step: 74%). The interval's low end (and the value) are raised
to it.

The share's interval also covers the recorder's own error (:func:`~gpuopt.findings.evidence.
recorder_model`, as at a loop's site): in ``examples/ragged_steps.py`` (473 ops a step, the
recorder's window 5-6 steps long, its estimate off by 40-70%) the share read 36-98% in identical
runs and the finding is absent in 1 of 20 whose majority is HIGH. Such a step is borderline,
never HIGH, unless its recorder-free floor clears HIGH on its own.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gpuopt.findings.engine import rule
from gpuopt.findings.estimates import speedup_if_removed
from gpuopt.findings.evidence import (
    drift_of,
    evidence_of,
    judge,
    recorder_model,
    share_interval,
)
from gpuopt.findings.measures import from_trace, on_cpu_only, value
from gpuopt.model.profile import EvidenceInterval, Finding, Profile
from gpuopt.model.records import given
from gpuopt.units import fmt_count, fmt_frac, fmt_us, num

MIN_OPS_PER_STEP = 100
MIN_TINY_SHARE = 0.5  # at least half of the ops are tiny calls
MIN_HOST_SHARE = 0.3  # and issuing them takes at least 30% of the step
REMOVED = 0.9  # CUDA graphs: assumed share of the host dispatch time that goes away
MAX_PER_OP_FACTOR = 50.0  # host time per op above 50x a trivial op call is not dispatch
MIN_IMPLAUSIBLE_US = 100.0  # ... and never below 100 µs per op (eager Python per op stays below)
# The run-to-run drift (sd) of the dispatch share over quiet identical runs, larger than other
# shares' SHARE_DRIFT: bench_stability's evidence sd of `launch-bound`, 3.6pt (segmentation_loops,
# its share 0.14-0.33 in identical runs around the 30% threshold) and 5.9pt (index_loops) in
# 20 runs each: 3.6pt rounded up (index_loops sits far above HIGH, where a wider interval changes
# nothing). With the 2pt of other shares, three window steps at 0.33-0.35 make a HIGH finding in
# 2 of 20 runs whose majority has none.
DISPATCH_DRIFT = 0.04


def _gpu_launch(profile: Profile) -> dict[str, Any]:
    """Launch statistics from the GPU profiler window's trace analysis, when present."""
    if not profile.gpu:
        return {}
    first = profile.gpu[0]
    return {
        "gpu_launch_count": first.launch.count,
        "gpu_launch_delay_median_us": first.launch.delay_median_us,
        "gpu_launch_short_kernels": first.launch.short_kernels,
        "gpu_idle_pct": first.idle_pct,
    }


def plausible_per_op_us(profile: Profile) -> float:
    """The most host time per op that can still be dispatch (see the module docstring)."""
    calibrated = value(profile.dispatch.calibrated_op_us)
    return max(MAX_PER_OP_FACTOR * calibrated, MIN_IMPLAUSIBLE_US)


def dispatch_floor(profile: Profile) -> float | None:
    """The least share of the step that issuing its tiny ops can take (see the module): tiny ops
    per step × the calibrated cost of a trivial op call, over the unrecorded steps' median."""
    d = profile.dispatch
    tiny, cal, real = (
        value(d.tiny_ops_per_step),
        num(d.calibrated_op_us),
        num(profile.steps.time_s.median),
    )
    if not tiny or not cal or not real or real <= 0:
        return None
    return min(tiny * cal / (real * 1e6), 1.0)


def _dispatch_interval(profile: Profile) -> EvidenceInterval:
    d = profile.dispatch
    iv = share_interval(
        value(d.host_dispatch_share),
        given(d.host_dispatch_share_steps) or [],
        "host_dispatch_share",
        drift_of(profile, DISPATCH_DRIFT),
        recorder_model(profile, value(d.ops_per_step)),
    )
    floor = dispatch_floor(profile)
    if floor is None or floor <= iv.low:
        return iv
    low = round(floor, 4)
    return msgspec.structs.replace(
        iv,
        value=max(iv.value, low),
        low=low,
        high=max(iv.high, low),
        covers=f"{iv.covers}; at least {floor:.1%}: {fmt_count(value(d.tiny_ops_per_step))} tiny "
        f"ops × the {value(d.calibrated_op_us):.2f} µs a trivial op call costs without the "
        "recorder, over the unrecorded step",
    )


@evidence_of("launch-bound")
def dispatch_evidence(profile: Profile) -> EvidenceInterval | None:
    """The host dispatch share with its interval, where the step is many tiny ops (the rule's
    other conditions); None elsewhere."""
    if from_trace(profile):
        return None
    d = profile.dispatch
    ops = value(d.ops_per_step)
    if ops < MIN_OPS_PER_STEP or value(d.tiny_ops_per_step) / ops < MIN_TINY_SHARE:
        return None
    return _dispatch_interval(profile)


@rule("launch-bound", reads=("source", "dispatch", "gpu", "utilization", "steps"))
def launch_bound(profile: Profile) -> list[Finding]:
    if from_trace(profile):
        return []
    d = profile.dispatch
    ops = value(d.ops_per_step)
    tiny = value(d.tiny_ops_per_step)
    host_share = max(value(d.host_dispatch_share), dispatch_floor(profile) or 0.0)
    if ops < MIN_OPS_PER_STEP or tiny / ops < MIN_TINY_SHARE or host_share < MIN_HOST_SHARE:
        return []
    per_op_us = host_share * value(d.step_time_us) / ops
    if per_op_us > plausible_per_op_us(profile):
        return []
    top = d.top_sites or []
    site = top[0].site if top else None
    mean_us = value(d.mean_op_us)
    between_us = value(d.between_ops_us_per_step)
    note = (
        "measured on a CPU-only run: on a GPU this host time leaves the device idle between "
        "small kernels; "
        if on_cpu_only(profile)
        else ""
    )
    interval = _dispatch_interval(profile)
    judged = judge(interval, MIN_HOST_SHARE)
    outside = value(d.outside_ops_share)
    after = ""
    if outside >= 0.01:
        after += (
            f"; {fmt_frac(outside)} of the step ran no tensor op (sleep, I/O, Python: 'other', "
            "not counted here)"
        )
    return [
        Finding(
            id="launch-bound",
            severity=judged.severity,
            title=f"{fmt_count(ops)} small ops per step: issuing them takes "
            f"{fmt_frac(host_share)} of the step",
            site=site,
            evidence={
                "summary": (
                    f"{note}{fmt_count(ops)} ops per step ({fmt_count(tiny)} under "
                    f"{fmt_us(value(d.tiny_op_us, 25))}), mean {fmt_us(mean_us)} per op call, "
                    f"{fmt_us(between_us)} per step between ops{after}"
                ),
                "ops_per_step": ops,
                "tiny_ops_per_step": tiny,
                "mean_op_us": mean_us,
                "between_ops_us_per_step": between_us,
                "host_dispatch_share": host_share,
                "host_us_per_op": round(per_op_us, 2),
                "calibrated_op_us": num(d.calibrated_op_us),
                "recorder_overhead_us_per_op": num(d.recorder_overhead_us_per_op),
                **_gpu_launch(profile),
            },
            fix=(
                "Replay the step instead of dispatching every op: model = torch.compile(model, "
                'mode="reduce-overhead") (CUDA graphs), torch.cuda.CUDAGraph for a static step, '
                "or gpuopt's ahead-of-time scheduler gpuopt.aot.schedule(model, "
                "example_inputs); fuse element-wise chains and use fused/foreach optimizers "
                "(torch.optim.AdamW(..., fused=True))."
            ),
            est_speedup=speedup_if_removed(host_share, keep=1.0 - REMOVED),
            estimate_model=(
                "Amdahl: CUDA graphs replay the step's launches as one; "
                f"{int(REMOVED * 100)}% of the measured host dispatch time "
                f"({fmt_frac(host_share)} of the step) assumed removed"
            ),
            interval=interval,
            borderline=judged.borderline,
        )
    ]
