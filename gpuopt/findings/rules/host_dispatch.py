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
from gpuopt.findings.model import Finding, severity_for_share, speedup_if_removed
from gpuopt.findings.rules.host_common import (
    entries,
    fmt_count,
    from_trace,
    num,
    obj,
    on_cpu_only,
    pct,
)

MIN_OPS_PER_STEP = 100
MIN_TINY_SHARE = 0.5  # at least half of the ops are tiny calls
MIN_HOST_SHARE = 0.3  # and issuing them takes at least 30% of the step
REMOVED = 0.9  # CUDA graphs: assumed share of the host dispatch time that goes away


def _gpu_launch(doc: dict[str, Any]) -> dict[str, Any]:
    """Launch statistics from the GPU profiler window's trace analysis, when present."""
    gpu = entries(doc, "gpu")
    if not gpu:
        return {}
    raw = gpu[0].get("launch")
    launch: dict[str, Any] = raw if isinstance(raw, dict) else {}
    out: dict[str, Any] = {}
    for key in ("count", "delay_median_us", "short_kernels"):
        if key in launch:
            out[f"gpu_launch_{key}"] = launch[key]
    if "idle_pct" in gpu[0]:
        out["gpu_idle_pct"] = gpu[0]["idle_pct"]
    return out


@rule("launch-bound")
def launch_bound(doc: dict[str, Any]) -> list[Finding]:
    if from_trace(doc):
        return []
    d = obj(doc, "dispatch")
    ops = num(d.get("ops_per_step"))
    tiny = num(d.get("tiny_ops_per_step"))
    host_share = num(d.get("host_dispatch_share"))
    if ops < MIN_OPS_PER_STEP or tiny / ops < MIN_TINY_SHARE or host_share < MIN_HOST_SHARE:
        return []
    top = d.get("top_sites") if isinstance(d.get("top_sites"), list) else []
    site = top[0].get("site") if top and isinstance(top[0], dict) else None
    mean_us = num(d.get("mean_op_us"))
    between_us = num(d.get("between_ops_us_per_step"))
    cpu = on_cpu_only(doc)
    note = (
        "measured on a CPU-only run: on a GPU this host time leaves the device idle between small kernels; "
        if cpu
        else ""
    )
    return [
        Finding(
            id="launch-bound",
            severity=severity_for_share(host_share),
            title=f"{fmt_count(ops)} small ops per step: issuing them takes {pct(host_share)} of the step",
            site=site,
            evidence={
                "summary": (
                    f"{note}{fmt_count(ops)} ops per step ({fmt_count(tiny)} under "
                    f"{num(d.get('tiny_op_us'), 25):.0f} µs), mean {mean_us:.1f} µs per op call, "
                    f"{between_us:.0f} µs per step between ops"
                ),
                "ops_per_step": ops,
                "tiny_ops_per_step": tiny,
                "mean_op_us": mean_us,
                "between_ops_us_per_step": between_us,
                "host_dispatch_share": host_share,
                "recorder_overhead_us_per_op": d.get("recorder_overhead_us_per_op"),
                **_gpu_launch(doc),
            },
            fix=(
                "Replay the step instead of dispatching every op: model = torch.compile(model, "
                'mode="reduce-overhead") (CUDA graphs), torch.cuda.CUDAGraph for a static step, or '
                "gpuopt's ahead-of-time scheduler gpuopt.aot.schedule(model, example_inputs); fuse "
                "element-wise chains and use fused/foreach optimizers (torch.optim.AdamW(..., fused=True))."
            ),
            est_speedup=speedup_if_removed(host_share, keep=1.0 - REMOVED),
            estimate_model=(
                f"Amdahl: CUDA graphs replay the step's launches as one; {int(REMOVED * 100)}% of the "
                f"measured host dispatch time ({pct(host_share)} of the step) assumed removed"
            ),
        )
    ]
