"""Memory findings (docs/memory.md): a GPU left mostly empty by a launch-bound step, an allocator
holding memory in free blocks, and — where memory, not time, is the limit — the activations and
the optimizer state that fill it.

* ``memory-headroom``: the step's peak leaves room for a batch at least twice as large, and the
  step is bound by the host (launching or dispatching ops) — a larger batch does more work per
  launch. The estimate: the host's share ``s`` of the step stays the same time, the rest grows
  with the batch, so ``k`` times the batch gives ``k / (s + k(1-s))`` times the samples per
  second. The fix changes the training (the learning rate's scaling rule is said, never applied).
* ``memory-fragmentation``: the allocator reserved much more than it allocated at the peak (free
  blocks it cannot hand out), or an out-of-memory error says so.
* ``activation-memory``, ``optimizer-state-memory``: the run died of OOM, or the peak fills most
  of the device (less than twice the batch fits), and activations or optimizer state are a large
  part of the peak: activation checkpointing on the modules that keep the most; a leaner
  optimizer.
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct

from gpuopt.findings.engine import rule
from gpuopt.findings.estimates import at_least, severity_for_share
from gpuopt.findings.measures import on_cpu_only, value
from gpuopt.model.profile import Finding, MemoryByCategory, MemoryHolder, MemoryReport, Profile
from gpuopt.model.records import given
from gpuopt.units import fmt_bytes, fmt_count, fmt_frac, fmt_us

MIN_ROOM = 2.0  # headroom: at least twice the batch fits
MIN_HOST_SHARE = 0.3  # ... and the host's launching / dispatching is at least 30% of the step
MAX_FACTOR = 8  # a suggested batch at most 8x the script's
FRAGMENTED_SHARE = 0.2  # reserved - allocated at the peak, of what is reserved
FRAGMENTED_BYTES = 1 << 30  # ... and at least 1 GiB
TIGHT_USE = 0.8  # "memory is the limit": the peak above 80% of the usable memory
LARGE_SHARE = 0.25  # a category this large a share of the peak is worth a finding

LR_RULE = (
    "the learning rate usually needs scaling with the batch (linear scaling rule: lr × k for "
    "SGD, with a few warm-up steps; about √k for Adam-type optimizers) — gpuopt never changes it"
)


class _Fit(Struct, frozen=True):
    """What the rules read of ``memory``: the batch, the peak, the largest batch that fits."""

    batch: int
    peak: int
    max_batch: int
    usable: int
    split: MemoryByCategory | None
    source: str  # "predicted" or "measured"
    estimate: str  # how max_batch was found


def _fit(m: MemoryReport) -> _Fit | None:
    """The prediction's fit; else, on a GPU, one scaled from the measured split (what grows with
    the batch is assumed to be activations and temporaries)."""
    p = m.predicted
    if (
        p is not None
        and p.batch_size
        and p.peak_bytes
        and p.max_batch_size is not None
        and m.capacity_bytes
    ):
        usable = int(m.capacity_bytes * (1 - p.margin))
        how = f"replayed under fake tensors: {fmt_bytes(p.bytes_per_sample)} a sample"
        return _Fit(
            p.batch_size, p.peak_bytes, p.max_batch_size, usable, p.by_category, "predicted", how
        )
    me = m.measured
    batch = given(me.batch_size) if me is not None else None
    if me is None or me.by_category is None or not batch or not m.capacity_bytes:
        return None
    from gpuopt.defaults import MEMORY_MARGIN

    c = me.by_category
    grows = c.activations + c.temporaries
    if grows <= 0:
        return None
    usable = int(m.capacity_bytes * (1 - MEMORY_MARGIN))
    fixed = me.peak_allocated_bytes - grows
    best = max(int((usable - fixed) / (grows / batch)), 0)
    how = (
        f"measured: activations and temporaries {fmt_bytes(grows)} at batch {batch}, scaled "
        "linearly (an estimate)"
    )
    return _Fit(batch, me.peak_allocated_bytes, best, usable, c, "measured", how)


def _host_share(profile: Profile) -> float:
    """The share of the step the host spends launching or dispatching ops (the recorder's
    window), or the GPU's idle share in the profiler window's trace, whichever is larger."""
    share = value(profile.dispatch.host_dispatch_share)
    for g in profile.gpu or []:
        share = max(share, value(g.idle_pct) / 100.0)
    return share


class _OnDevice(Struct, frozen=True):
    """A CPU run's step as the named GPU would run it (an estimate): the host's time issuing its
    ops, the device's time running them, and the share of the step the device would idle."""

    host_s: float
    device_s: float
    model: str

    @property
    def idle_share(self) -> float:
        return max(0.0, 1.0 - self.device_s / self.host_s) if self.host_s > 0 else 0.0


def _cost_model(device: str | None) -> Any:
    """The named GPU's cost model (gpuopt.aot.costmodel); a card without one: the slowest
    model (V100), which makes the device's time longer and the step less dispatch-bound."""
    from gpuopt.aot.costmodel import PROFILES, get_profile

    try:
        return get_profile(device or "")
    except ValueError:
        return PROFILES["v100"]


def _on_device(profile: Profile, m: MemoryReport) -> _OnDevice | None:
    """On a CPU-only run with a device named (``--memory-for``): the recorded ops issued as
    eager CUDA ops (dispatch and launch each, views dispatch only) against the device's time
    for them: the replay's FLOPs at the FP32 peak, each kernel's shortest time and its gap, the
    step's peak bytes read and written three times (forward, backward, optimizer) at the HBM
    bandwidth, all at the model's efficiency."""
    p = m.predicted
    flops = given(p.step_flops) if p is not None else None
    d = profile.dispatch
    ops, views = value(d.ops_per_step), value(d.view_ops_per_step)
    if not on_cpu_only(profile) or p is None or flops is None or not ops or not p.peak_bytes:
        return None
    dev = _cost_model(m.device)
    kernels = max(ops - views, 0.0)
    host = kernels * dev.eager_op_s + views * dev.eager_view_s
    device = (
        flops / (dev.fp32_flops * dev.efficiency)
        + kernels * (dev.min_kernel_s + dev.stream_kernel_s)
        + 3 * p.peak_bytes / (dev.mem_bw * dev.efficiency)
    )
    model = (
        f"{fmt_count(ops)} ops a step issued eagerly on {dev.name} ({fmt_us(host * 1e6)} of "
        f"host time) against {fmt_us(device * 1e6)} of device time ({flops / 1e6:,.1f} MFLOP "
        "at FP32, each kernel's shortest time, the peak's bytes moved three times; the aot "
        "cost model's figures)"
    )
    return _OnDevice(host, device, model)


def _suggested(batch: int, max_batch: int) -> int:
    """The script's batch times the largest power of two that fits (at most MAX_FACTOR)."""
    k = 1
    while k * 2 <= MAX_FACTOR and batch * k * 2 <= max_batch:
        k *= 2
    return batch * k


@rule("memory-headroom", reads=("memory", "dispatch", "gpu", "dataloaders"))
def memory_headroom(profile: Profile) -> list[Finding]:
    m = given(profile.memory)
    fit = _fit(m) if m is not None else None
    if m is None or fit is None or fit.max_batch < MIN_ROOM * fit.batch:
        return []
    share = _host_share(profile)
    predicted = _on_device(profile, m)
    if predicted is not None and predicted.idle_share > share:
        share = predicted.idle_share
    else:
        predicted = None
    if share < MIN_HOST_SHARE:
        return []
    return _headroom(profile, m, fit, share, predicted)


def _headroom(
    profile: Profile, m: MemoryReport, fit: _Fit, share: float, predicted: _OnDevice | None
) -> list[Finding]:
    new = _suggested(fit.batch, fit.max_batch)
    k = new / fit.batch
    est = k / (share + k * (1 - share))
    where = m.device or "the GPU"
    title = (
        f"{where} is {fmt_frac(fit.peak / max(fit.usable, 1), 0)} full at batch {fit.batch} "
        f"and the step is host-bound: batch {fmt_count(new)} fits"
    )
    summary = (
        "host share measured on a CPU-only run, memory predicted for the GPU; "
        if on_cpu_only(profile) and predicted is None
        else ""
    )
    summary += (
        f"peak {fmt_bytes(fit.peak)} of {fmt_bytes(fit.usable)} usable at batch "
        f"{fit.batch} ({fit.source}); up to batch {fmt_count(fit.max_batch)} fits "
        f"({fit.estimate}); "
    )
    if predicted is None:
        summary += f"the host launches or dispatches ops {fmt_frac(share)} of the step"
    else:
        summary += (
            f"predicted from this CPU run: the device would idle {fmt_frac(share)} of the step "
            f"while the host issues ops ({predicted.model})"
        )
    evidence: dict[str, Any] = {
        "summary": summary,
        "batch_size": fit.batch,
        "peak_bytes": fit.peak,
        "usable_bytes": fit.usable,
        "max_batch_size": fit.max_batch,
        "suggested_batch_size": new,
        "host_share": round(share, 4),
        "source": fit.source,
    }
    if predicted is not None:
        evidence["host_share_source"] = "predicted"
        evidence["predicted_host_us_per_step"] = round(predicted.host_s * 1e6, 1)
        evidence["predicted_device_us_per_step"] = round(predicted.device_s * 1e6, 1)
    return [
        Finding(
            id="memory-headroom",
            severity=at_least(severity_for_share(share), "low"),
            title=title,
            site=profile.train_loader_site(),
            evidence=evidence,
            fix=(
                f"Raise the batch size from {fit.batch} to {new} (up to {fmt_count(fit.max_batch)} "
                f"fits): fewer, larger launches do the same work. This changes the training: "
                f"{LR_RULE}. gpuopt optimize --fix batch-size applies the batch size (opt-in)."
            ),
            est_speedup=est,
            estimate_model=(
                f"samples/s at {k:g}x the batch: the host's {fmt_frac(share)} of the step "
                "assumed to stay the same time, the rest to grow with the batch "
                f"(k / (s + k(1-s))); memory {fit.source}"
                + ("; the host's share predicted for the device" if predicted else "")
            ),
            fix_params={
                "batch_size": str(new),
                "from_batch_size": str(fit.batch),
                "max_batch_size": str(fit.max_batch),
            },
        )
    ]


@rule("memory-fragmentation", reads=("memory",))
def memory_fragmentation(profile: Profile) -> list[Finding]:
    m = given(profile.memory)
    if m is None:
        return []
    free, reserved, oom_site = _free_blocks(m)
    if free is None or reserved is None:
        return []
    died = m.oom is not None
    if not died and (free < FRAGMENTED_BYTES or free < FRAGMENTED_SHARE * reserved):
        return []
    if died and free < max(FRAGMENTED_BYTES // 4, 0.05 * reserved):
        return []
    share = free / max(reserved, 1)
    return [
        Finding(
            id="memory-fragmentation",
            severity="high" if died else ("medium" if share >= 0.3 else "low"),
            title=f"{fmt_bytes(free)} reserved by the allocator but not allocated "
            f"({fmt_frac(share, 0)} of what it holds)",
            site=oom_site,
            evidence={
                "summary": (
                    f"{fmt_bytes(free)} of {fmt_bytes(reserved)} reserved is in free blocks "
                    + ("when the run ran out of memory" if died else "at the run's peak")
                ),
                "free_bytes": free,
                "reserved_bytes": reserved,
            },
            fix=(
                "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the environment: the "
                "allocator grows segments instead of leaving gaps between fixed-size ones, so "
                "differently sized tensors from step to step stop fragmenting it."
            ),
        )
    ]


def _free_blocks(m: MemoryReport) -> tuple[int | None, int | None, str | None]:
    """Free bytes the allocator holds and what it reserved: from an OOM's message, else the
    measured peaks."""
    if m.oom is not None:
        free = given(m.oom.reserved_unallocated_bytes)
        if free is not None:
            cap = given(m.oom.capacity_bytes) or m.capacity_bytes or free
            return free, cap, m.oom.site
    me = m.measured
    if me is None:
        return None, None, None
    return given(me.fragmentation_bytes), me.peak_reserved_bytes, None


def _memory_bound(m: MemoryReport) -> tuple[MemoryByCategory, int, str] | None:
    """``(split, peak, why)`` when memory is the limit: an OOM, or a peak that fills the device
    (less than twice the batch fits)."""
    fit = _fit(m)
    if m.oom is not None:
        split = fit.split if fit is not None else None
        if split is not None:
            return split, max(split.total(), 1), "the run ran out of memory"
        return None
    if fit is None or fit.split is None:
        return None
    tight = fit.peak >= TIGHT_USE * fit.usable or fit.max_batch < MIN_ROOM * fit.batch
    if not tight:
        return None
    why = f"the peak ({fmt_bytes(fit.peak)}) leaves room for less than {MIN_ROOM:g}x the batch"
    return fit.split, max(fit.peak, 1), why


def _largest(m: MemoryReport) -> list[MemoryHolder]:
    predicted: list[MemoryHolder] = []
    if m.predicted is not None:
        predicted = given(m.predicted.largest) or []
    if predicted:
        return list(predicted)
    return list(m.measured.largest) if m.measured is not None else []


def _own(split: MemoryByCategory, peak: int) -> int:
    """The step's own bytes at the peak: the model's, its gradients', its optimizer's and its
    activations' — not ``other`` (the batch, the script's tensors, the library workspaces such
    as cuBLAS's 64 MiB), which no checkpointing or optimizer setting changes."""
    own = peak - split.other
    return own if own > 0 else max(peak, 1)


def _through_framework(profile: Profile) -> str:
    """On a framework run: the framework's own settings for bf16 and gradient accumulation,
    where the script sets them; both change the training (``gpuopt optimize`` applies them only
    when named)."""
    from gpuopt.findings.rules.framework import knob_said

    fw = given(profile.framework)
    if fw is None:
        return ""
    said = []
    amp = knob_said(fw, "amp")
    if amp:
        said.append(
            f"bf16 under {fw.name} is {amp} (its gain is a GPU's; changes the training: "
            "gpuopt optimize --fix amp)"
        )
    acc = knob_said(fw, "accumulation")
    if acc:
        said.append(
            f"the batch divided by N with {acc} keeps the effective batch and about 1/N of "
            "the activations (gpuopt optimize --fix accumulation sets both, judged by the "
            "memory it frees)"
        )
    return (" " + "; ".join(said) + ".") if said else ""


@rule("activation-memory", reads=("memory", "framework"))
def activation_memory(profile: Profile) -> list[Finding]:
    m = given(profile.memory)
    bound = _memory_bound(m) if m is not None else None
    if m is None or bound is None:
        return []
    split, peak, why = bound
    acts = split.activations + split.temporaries
    own = _own(split, peak)
    if acts < LARGE_SHARE * own:
        return []
    top = [h for h in _largest(m) if h.module][:3]
    names = ", ".join(f"{h.module} ({fmt_bytes(h.bytes)})" for h in top) or "the largest blocks"
    return [
        Finding(
            id="activation-memory",
            severity="high" if m.oom is not None else "medium",
            title=f"activations take {fmt_frac(acts / own, 0)} of the step's memory: {why}",
            site=top[0].site if top else None,
            evidence={
                "summary": f"activations and backward temporaries {fmt_bytes(acts)} at the peak; "
                f"largest kept: {names}",
                "activation_bytes": split.activations,
                "temporary_bytes": split.temporaries,
                "peak_bytes": peak,
                "largest": [h.module for h in top],
            },
            fix=(
                f"Recompute instead of keeping: wrap the forward of the modules that keep the "
                f"most ({names}) in torch.utils.checkpoint.checkpoint(module, x, "
                "use_reentrant=False) — their activations are made again in the backward (about "
                "one more forward of them: ~+20-30% step time for the whole model); bf16 autocast "
                "halves what is kept."
            )
            + _through_framework(profile),
            fix_params={"modules": ", ".join(h.module or "" for h in top)},
        )
    ]


@rule("optimizer-state-memory", reads=("memory",))
def optimizer_state_memory(profile: Profile) -> list[Finding]:
    m = given(profile.memory)
    bound = _memory_bound(m) if m is not None else None
    if m is None or bound is None:
        return []
    split, peak, why = bound
    state = split.optimizer_state
    own = _own(split, peak)
    if state < LARGE_SHARE * own:
        return []
    return [
        Finding(
            id="optimizer-state-memory",
            severity="high" if m.oom is not None else "medium",
            title=f"optimizer state takes {fmt_frac(state / own, 0)} of the step's memory: {why}",
            evidence={
                "summary": f"optimizer state {fmt_bytes(state)} at the peak (its step's "
                f"temporaries included), parameters {fmt_bytes(split.parameters)}",
                "optimizer_state_bytes": state,
                "parameter_bytes": split.parameters,
                "peak_bytes": peak,
            },
            fix=(
                "torch.optim's default on CUDA (foreach) makes temporaries the size of all the "
                "parameters during the step: foreach=False steps one tensor at a time, fused=True "
                "(Adam, AdamW, SGD) in one kernel without them; 8-bit states "
                "(bitsandbytes.optim.AdamW8bit: 2 bytes a parameter instead of 8) are an option "
                "that changes numerics; across GPUs, FSDP/ZeRO shard the state."
            ),
        )
    ]
