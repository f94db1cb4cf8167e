"""Findings of a multi-rank run (docs/distributed.md), read from the merged document:

* ``straggler-rank`` — the rank whose own work (step time less its wait at collectives) is the
  longest, by how much per step, on what (its breakdown against the other ranks'), and what the
  others lose waiting for it;
* ``exposed-communication`` — time every rank spends communicating (not waiting) that does not
  overlap compute: DDP's knobs that overlap it with backward;
* ``gradient-accumulation-sync`` — several backward passes per optimizer step, each
  all-reducing the gradients: ``no_sync()`` for all but the last;
* ``small-buckets`` — many DDP buckets whose fixed per-call cost (fitted by the Ring-AllReduce
  model) is a large part of the all-reduce;
* ``low-bus-bandwidth`` — the Ring-AllReduce model's bus bandwidth well below the link's nominal
  bandwidth (where gpuopt knows it: NCCL within a node; GPU-only).

Every ``est_speedup`` is an estimate and names its model.
"""

from __future__ import annotations

import msgspec

from gpuopt.findings.engine import rule
from gpuopt.findings.estimates import at_least, severity_for_share, speedup_if_removed
from gpuopt.model.profile import (
    CollectiveOp,
    DdpModel,
    Finding,
    Profile,
    RankEntry,
    StragglerEvidence,
)
from gpuopt.model.records import BREAKDOWN_KEYS, given
from gpuopt.units import fmt_bytes, fmt_duration, fmt_frac

STRAGGLER_SHARE = 0.05  # the others' wait, of the job's step time, before it is a finding
STRAGGLER_MIN_S = 5e-4  # and at least this much more own work per step
EXPOSED_SHARE = 0.05  # communication (not waiting) of the step time
SMALL_BUCKETS = 8  # at least this many buckets
LATENCY_SHARE = 0.3  # per-call cost, of the all-reduce time
LOW_EFFICIENCY = 0.5  # bus bandwidth below this share of nominal
SMALL_GRADIENTS = 2**20  # below this, an all-reduce is its per-call cost
_PART_NAMES = {
    "data_wait": "waiting on its DataLoader",
    "h2d": "copying to its device",
    "sync": "syncing with its device",
    "compute": "compute",
    "other": "host code between ops",
}
_PART_FIXES = {
    "data_wait": "it waits longer on its DataLoader: give it workers (num_workers), check that "
    "its shard is not larger or slower to read (DistributedSampler splits evenly; a custom "
    "split may not)",
    "h2d": "its host-to-device copies take longer: pinned memory and non_blocking copies, or a "
    "slower PCIe link on that GPU",
    "sync": "it syncs with its device more often: look for .item()/print or rank-only logging "
    "in the step",
    "compute": "it computes longer: uneven batch sizes or sequence lengths across ranks (pad or "
    "bucket to equal work), or a slower/throttled device or busier host on that rank",
    "other": "it runs more host code between ops: rank-only work in the step (if rank == 0: "
    "logging, evaluation, checkpointing) belongs every N steps or in a background thread",
}


def _own(e: RankEntry) -> float | None:
    v = given(e.own_work_s_per_step)
    return float(v) if isinstance(v, (int, float)) else None


def _wait(e: RankEntry) -> float:
    v = given(e.collective_wait_s_per_step)
    return float(v) if isinstance(v, (int, float)) else 0.0


def _step_s(e: RankEntry) -> float | None:
    for v in (given(e.step_time_mean_s), given(e.step_time_median_s)):
        if isinstance(v, (int, float)) and v > 0:
            return float(v)
    return None


def _part_seconds(e: RankEntry) -> dict[str, float]:
    step = _step_s(e)
    if e.breakdown is None or step is None:
        return {}
    return {k: float(getattr(e.breakdown, k)) * step for k in BREAKDOWN_KEYS}


@rule("straggler-rank", reads=("ranks", "trace"))
def straggler_from_ranks(profile: Profile) -> list[Finding]:
    if given(profile.trace) is not None:  # a job from traces: gpu_trace's rule says it, once
        return []
    entries = [e for e in profile.ranks or [] if _own(e) is not None and _step_s(e)]
    if len(entries) < 2:
        return []
    import statistics  # here, not at the top: 5-10 ms of every report's start

    slow = max(entries, key=lambda e: _own(e) or 0.0)
    others = [e for e in entries if e is not slow]
    extra = (_own(slow) or 0.0) - statistics.median(_own(e) or 0.0 for e in others)
    waits = [_wait(e) for e in others]
    step = statistics.fmean(_step_s(e) or 0.0 for e in entries)
    share = statistics.fmean(waits) / step if step > 0 else 0.0
    if extra < STRAGGLER_MIN_S or share < STRAGGLER_SHARE:
        return []
    # balanced: the straggler's extra own work spread evenly, every rank doing the mean
    excess = (_own(slow) or 0.0) - statistics.fmean(_own(e) or 0.0 for e in entries)
    mine = _part_seconds(slow)
    theirs = [_part_seconds(e) for e in others]
    by_part = {
        k: round(v - statistics.median(t.get(k, 0.0) for t in theirs), 6) for k, v in mine.items()
    }
    top = max(by_part, key=lambda k: by_part[k]) if by_part else None
    more = sorted(((v, k) for k, v in by_part.items() if v >= 0.1 * extra > 0), reverse=True)
    top_text = (
        "; more of its step goes to "
        + ", ".join(f"{_PART_NAMES[k]} (+{fmt_duration(v)})" for v, k in more)
        if more
        else ""
    )
    summary = (
        f"rank {slow.rank} does {fmt_duration(extra)} more own work per step than the other "
        f"ranks (median){top_text}; the other ranks wait {fmt_duration(statistics.fmean(waits))} "
        f"per step for it at collectives ({fmt_frac(share)} of the step)"
    )
    evidence = StragglerEvidence(
        summary=summary,
        rank=slow.rank,
        extra_s_per_step=round(extra, 6),
        others_wait_s_per_step=round(statistics.fmean(waits), 6),
        others_wait_s_total_per_step=round(sum(waits), 6),
        own_work_s_per_step={str(e.rank): round(_own(e) or 0.0, 6) for e in entries},
        wait_s_per_step={str(e.rank): round(_wait(e), 6) for e in entries},
        extra_by_part=by_part,
        top_part=top,
        step_time_s=round(step, 6),
        steps_compared=min(e.steps for e in entries),
    )
    fix = f"Balance the work of rank {slow.rank}: " + (
        _PART_FIXES.get(top, "") if top else "compare its breakdown with the other ranks'"
    )
    return [
        Finding(
            id="straggler-rank",
            severity=severity_for_share(share),
            title=f"Rank {slow.rank} is the straggler: the other ranks wait for it every step",
            evidence=msgspec.to_builtins(evidence),
            fix=fix + ".",
            est_speedup=speedup_if_removed(min(max(excess, 0.0) / step, 0.99)),
            estimate_model="balanced ranks: the straggler's extra own work spread evenly over "
            "all ranks, so each step ends when the ranks' mean own work is done",
        )
    ]


def _first_ddp(profile: Profile) -> DdpModel | None:
    dist = given(profile.distributed)
    return dist.ddp[0] if dist is not None and dist.ddp else None


@rule("exposed-communication", reads=("ranks", "distributed"))
def exposed_communication(profile: Profile) -> list[Finding]:
    entries = [e for e in profile.ranks or [] if _step_s(e)]
    comm = [
        (float(v), _step_s(e) or 1.0)
        for e in entries
        if isinstance(v := given(e.collective_comm_s_per_step), (int, float))
    ]
    if len(comm) < 2:
        return []
    import statistics

    comm_s = statistics.fmean(c for c, _ in comm)
    share = statistics.fmean(c / s for c, s in comm)
    if share < EXPOSED_SHARE:
        return []
    ddp = _first_ddp(profile)
    evidence: dict[str, object] = {
        "summary": f"every rank spends {fmt_duration(comm_s)} per step ({fmt_frac(share)}) "
        "blocked in collectives while communicating, not waiting for a slower rank",
        "comm_s_per_step": round(comm_s, 6),
        "share": round(share, 4),
    }
    top = _top_call(profile)
    if top is not None and (ddp is None or top.origin != "ddp"):
        ddp = None  # the script's own calls or FSDP's block longest: their fix, at their site
        evidence.update(op=top.op, origin=top.origin, blocked_s_per_step=top.blocked_s_per_step)
    fix, params = _overlap_fix(ddp, evidence) if ddp is not None else _call_fix(top)
    site = ddp.site if ddp is not None else (top.site if top is not None else None)
    return [
        Finding(
            id="exposed-communication",
            severity=severity_for_share(share),
            title="Communication is not overlapped with compute",
            site=site,
            evidence=evidence,
            fix=fix,
            est_speedup=speedup_if_removed(share, keep=0.5),
            estimate_model="Amdahl: half of the exposed communication hidden behind backward",
            fix_params=params,
        )
    ]


def _top_call(profile: Profile) -> CollectiveOp | None:
    """The kind of call (not DDP's gradient all-reduce) that blocks this rank longest."""
    dist = given(profile.distributed)
    calls = [c for c in (dist.collectives if dist is not None else []) if c.blocked_s_per_step]
    ddp = dist.ddp[0].exposed_s_per_step if dist is not None and dist.ddp else None
    top = max(calls, key=lambda c: c.blocked_s_per_step or 0.0, default=None)
    if top is None or (ddp is not None and ddp >= (top.blocked_s_per_step or 0.0)):
        return None
    return top


def _call_fix(top: CollectiveOp | None) -> tuple[str, dict[str, str]]:
    if top is not None and top.origin == "fsdp":
        return (
            f"FSDP's {top.op} calls wait in the step: prefetch the next unit's all-gather "
            "(FSDP: forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE; "
            "FSDP2: set_modules_to_forward_prefetch / set_modules_to_backward_prefetch), keep "
            "the last units unsharded after forward (reshard_after_forward=False: more memory, "
            "fewer all-gathers), or wrap larger units (fewer, larger collectives).",
            {},
        )
    return (
        "Overlap the collectives with compute: issue them with async_op=True and wait() just "
        "before the result is needed (a logged loss: every N steps), or let DDP/FSDP do the "
        "gradient reduction (they overlap it with backward).",
        {},
    )


def _overlap_fix(ddp: DdpModel, evidence: dict[str, object]) -> tuple[str, dict[str, str]]:
    """DDP's overlap knobs that this model does not use yet, with their values."""
    evidence.update(
        buckets=ddp.buckets,
        grad_bytes=ddp.grad_bytes,
        overlapped_share=ddp.overlapped_share,
        exposed_s_per_step=ddp.exposed_s_per_step,
        bucket_cap_bytes=ddp.bucket_cap_bytes,
        gradient_as_bucket_view=ddp.gradient_as_bucket_view,
        static_graph=ddp.static_graph,
    )
    steps, params = [], {}
    if ddp.grad_bytes < SMALL_GRADIENTS:
        return (
            f"The gradients are small ({fmt_bytes(ddp.grad_bytes)}): the all-reduce costs its "
            "fixed per-call time, which no bucket setting hides. All-reduce less often: "
            "accumulate gradients over several micro-batches under model.no_sync(), or use a "
            "larger batch per step.",
            {},
        )
    if ddp.buckets <= 1:
        cap = max(ddp.grad_bytes / 4 / 2**20, 1.0)
        params["bucket_cap_mb"] = f"{cap:.0f}"
        steps.append(
            f"bucket_cap_mb={cap:.0f}: one bucket of {fmt_bytes(ddp.grad_bytes)} starts its "
            "all-reduce only after backward ends; smaller buckets start during backward"
        )
    if ddp.gradient_as_bucket_view is False:
        params["gradient_as_bucket_view"] = "True"
        steps.append("gradient_as_bucket_view=True (no copy of the gradients into the buckets)")
    if ddp.static_graph is False and not ddp.find_unused_parameters:
        params["static_graph"] = "True"
        steps.append(
            "static_graph=True when the set of parameters used does not change between steps "
            "(DDP can then reorder buckets to the gradients' ready order)"
        )
    if not steps:
        steps.append(
            "the overlap knobs are set already: send fewer bytes (a bf16 compression hook: "
            "model.register_comm_hook(None, default_hooks.bf16_compress_hook)) or a faster link"
        )
    return "In DistributedDataParallel(...): " + "; ".join(steps) + ".", params


@rule("gradient-accumulation-sync", reads=("distributed", "ranks", "steps"))
def gradient_accumulation_sync(profile: Profile) -> list[Finding]:
    ddp = _first_ddp(profile)
    if ddp is None or ddp.syncs_per_step is None or ddp.forwards_per_step is None:
        return []
    syncs, forwards = ddp.syncs_per_step, ddp.forwards_per_step
    if syncs < 1.5 or forwards < 1.5:
        return []
    step = given(profile.steps.time_s.mean) or 0.0
    # what the rounds cost: the ranks' communicating time (their waiting is the straggler's),
    # else this rank's exposed time
    comm = [
        float(v)
        for e in profile.ranks or []
        if isinstance(v := given(e.collective_comm_s_per_step), (int, float))
    ]
    import statistics

    cost = statistics.fmean(comm) if comm else (ddp.exposed_s_per_step or 0.0)
    saved = cost * (syncs - 1) / syncs
    share = min(saved / step, 0.99) if step > 0 else 0.0
    return [
        Finding(
            id="gradient-accumulation-sync",
            severity=at_least(severity_for_share(share), "medium"),
            title="Every micro-batch all-reduces the gradients (gradient accumulation without "
            "no_sync)",
            site=ddp.site,
            evidence={
                "summary": f"{forwards:.1f} forward/backward passes per optimizer step, each "
                f"followed by a gradient all-reduce ({syncs:.1f} per step, "
                f"{fmt_bytes(ddp.grad_bytes * syncs)}); only the last one is needed",
                "forwards_per_step": round(forwards, 3),
                "syncs_per_step": round(syncs, 3),
                "bytes_saved_per_step": int(ddp.grad_bytes * (syncs - 1)),
                "comm_s_per_step": round(cost, 6),
                "saved_s_per_step": round(saved, 6),
            },
            fix="Wrap all but the last micro-batch's forward and backward in "
            "`with model.no_sync():` so DDP all-reduces the accumulated gradients once per "
            "optimizer step.",
            est_speedup=speedup_if_removed(share),
            estimate_model="Amdahl: the ranks' communicating time of all but one all-reduce "
            "round per step removed",
        )
    ]


@rule("small-buckets", reads=("distributed", "steps"))
def small_buckets(profile: Profile) -> list[Finding]:
    dist = given(profile.distributed)
    ddp = _first_ddp(profile)
    ring = given(dist.ring) if dist is not None else None
    if ddp is None or ring is None or ddp.buckets < SMALL_BUCKETS or ring.latency_s is None:
        return []
    overhead = ring.latency_s * ddp.buckets
    share_of_comm = overhead / ring.time_s if ring.time_s > 0 else 0.0
    if share_of_comm < LATENCY_SHARE:
        return []
    cap_mb = (ddp.bucket_cap_bytes or 25 * 2**20) / 2**20
    import statistics

    median_bytes = statistics.median(ddp.bucket_bytes)
    new_cap = max(25.0, cap_mb * 4)
    exposed_share = 0.0
    step = given(profile.steps.time_s.mean) or 0.0
    if step > 0 and ddp.exposed_s_per_step:
        exposed_share = ddp.exposed_s_per_step / step
    return [
        Finding(
            id="small-buckets",
            severity="medium" if share_of_comm >= 0.5 else "low",
            title=f"{ddp.buckets} small DDP buckets: the per-call cost dominates the all-reduce",
            site=ddp.site,
            evidence={
                "summary": f"{ddp.buckets} buckets of {fmt_bytes(median_bytes)} (median); "
                f"the fitted per-call cost ({fmt_duration(ring.latency_s)}) times the buckets "
                f"is {fmt_frac(share_of_comm)} of the all-reduce time (an estimate: "
                f"{ring.model})",
                "buckets": ddp.buckets,
                "bucket_cap_bytes": ddp.bucket_cap_bytes,
                "latency_s": ring.latency_s,
                "latency_share": round(share_of_comm, 4),
            },
            fix=f"Raise DistributedDataParallel(..., bucket_cap_mb={new_cap:.0f}) (now "
            f"{cap_mb:g}): fewer, larger all-reduces.",
            est_speedup=speedup_if_removed(exposed_share * share_of_comm, keep=0.5),
            estimate_model="Amdahl: half of the per-call cost of the exposed all-reduce removed",
            fix_params={"bucket_cap_mb": f"{new_cap:.0f}"},
        )
    ]


@rule("low-bus-bandwidth", reads=("distributed",))
def low_bus_bandwidth(profile: Profile) -> list[Finding]:
    dist = given(profile.distributed)
    ring = given(dist.ring) if dist is not None else None
    if ring is None or ring.efficiency is None or ring.efficiency >= LOW_EFFICIENCY:
        return []
    return [
        Finding(
            id="low-bus-bandwidth",
            severity="medium",
            title="The gradient all-reduce runs far below the link's bandwidth",
            evidence={
                "summary": f"bus bandwidth {ring.bus_gbps:.1f} GB/s is {fmt_frac(ring.efficiency)} "
                f"of the nominal {ring.nominal_gbps:.0f} GB/s ({ring.nominal_source}); an "
                f"estimate: {ring.model}",
                "bus_gbps": round(ring.bus_gbps, 3),
                "nominal_gbps": ring.nominal_gbps,
                "efficiency": round(ring.efficiency, 4),
                "bytes": ring.bytes,
                "time_s": ring.time_s,
            },
            fix="Check the GPUs' links (nvidia-smi topo -m: NVLink vs PCIe/SYS paths), NCCL's "
            "choice (NCCL_DEBUG=INFO), and other traffic on the link; larger buckets help when "
            "the per-call cost dominates.",
            estimate_model=ring.model,
        )
    ]
