"""``launch-bound``: the step is many tiny ops, and the host's time issuing them dominates.

Each op costs the host microseconds of Python, autograd and dispatcher work plus a kernel launch.
When ops are small, the GPU finishes each kernel before the host has issued the next one and idles
in between. The recorder measures, for its window, ops per step, how long op calls take, and the
host time between ops (data loading and sync waits excluded); ``host_dispatch_share`` is between-op
time plus the time of tiny op calls, over the step.
"""

from __future__ import annotations

from typing import Any

from gpuopt.findings.engine import rule
from gpuopt.findings.estimates import severity_for_share, speedup_if_removed
from gpuopt.findings.measures import from_trace, on_cpu_only, value
from gpuopt.model.profile import Finding, Profile
from gpuopt.units import fmt_count, fmt_frac, fmt_us, num

MIN_OPS_PER_STEP = 100
MIN_TINY_SHARE = 0.5  # at least half of the ops are tiny calls
MIN_HOST_SHARE = 0.3  # and issuing them takes at least 30% of the step
REMOVED = 0.9  # CUDA graphs: assumed share of the host dispatch time that goes away


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


@rule("launch-bound", reads=("source", "dispatch", "gpu"))
def launch_bound(profile: Profile) -> list[Finding]:
    if from_trace(profile):
        return []
    d = profile.dispatch
    ops = value(d.ops_per_step)
    tiny = value(d.tiny_ops_per_step)
    host_share = value(d.host_dispatch_share)
    if ops < MIN_OPS_PER_STEP or tiny / ops < MIN_TINY_SHARE or host_share < MIN_HOST_SHARE:
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
    return [
        Finding(
            id="launch-bound",
            severity=severity_for_share(host_share),
            title=f"{fmt_count(ops)} small ops per step: issuing them takes "
            f"{fmt_frac(host_share)} of the step",
            site=site,
            evidence={
                "summary": (
                    f"{note}{fmt_count(ops)} ops per step ({fmt_count(tiny)} under "
                    f"{fmt_us(value(d.tiny_op_us, 25))}), mean {fmt_us(mean_us)} per op call, "
                    f"{fmt_us(between_us)} per step between ops"
                ),
                "ops_per_step": ops,
                "tiny_ops_per_step": tiny,
                "mean_op_us": mean_us,
                "between_ops_us_per_step": between_us,
                "host_dispatch_share": host_share,
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
        )
    ]
