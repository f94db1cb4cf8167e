"""Findings from PyTorch profiler traces (``gpuopt report TRACE``).

They read only ``profile.trace`` (the trace analyses' records, built by
:mod:`gpuopt.assemble.trace_profile`). The ids that run-time rules also
produce (dataloader-bound, sync-in-step, pageable-h2d, launch-bound) fire only on documents with
``source == "trace"``, so one cause is not reported twice; ``low-gpu-util`` and
``straggler-rank`` (trace-only evidence) also fire on run documents that carry a profiler-window
trace. Every finding carries ``source: "trace"`` and the measured numbers.
"""

from __future__ import annotations

from typing import Any

from msgspec import UnsetType

from gpuopt.findings.engine import rule
from gpuopt.findings.estimates import severity_for_share, speedup_if_removed
from gpuopt.model.profile import Finding, Profile
from gpuopt.model.trace import IdleSite, StepOverview, Straggler, TraceRank
from gpuopt.units import fmt_bytes, fmt_frac, fmt_pct, fmt_us

LOW_UTIL_IDLE_PCT = 30.0  # idle share of the GPU span that makes utilisation "low"
MIN_CAUSE_SHARE = 0.05  # a cause must cover at least this share of step time to be reported
LAUNCH_BOUND_SHORT_SHARE = 0.5
STRAGGLER_SHARE = 0.05
PAGEABLE_MIN_SHARE = 0.005  # pageable copies must take 0.5% of step time ...
PAGEABLE_MIN_BYTES = 1 << 20  # ... or move at least 1 MiB

_AMDAHL = "Amdahl: step time without the idle time this cause covers (upper bound)"


def _ranks(profile: Profile, any_source: bool = False) -> list[TraceRank]:
    if profile.source != "trace" and not any_source:
        return []
    tr = profile.trace
    if isinstance(tr, UnsetType) or isinstance(tr.ranks, UnsetType):
        return []
    return list(tr.ranks)


def _step_total_us(r: TraceRank) -> float:
    return float(sum(s.dur_us for s in r.steps))


def _top_site(r: TraceRank, cause: str) -> IdleSite | None:
    for s in r.idle_causes.sites:
        if s.cause == cause:
            return s
    return None


def _cause_finding(profile: Profile, cause: str, fid: str, title: str, fix: str) -> list[Finding]:
    for r in _ranks(profile):
        total = _step_total_us(r)
        us = dict(r.idle_causes.by_cause.items()).get(cause, 0.0)
        if total <= 0 or us / total < MIN_CAUSE_SHARE:
            continue
        share = us / total
        site = _top_site(r, cause)
        n_steps = max(len([s for s in r.steps if s.step is not None]), 1)
        summary = (
            f"rank {r.rank}: the GPU sat idle {fmt_us(us)} ({fmt_frac(share)} of step time) "
            f"while the launching thread was in {cause}" + (f" ({site.op})" if site else "")
        )
        return [
            Finding(
                id=fid,
                severity=severity_for_share(share),
                title=title,
                evidence={
                    "summary": summary,
                    "rank": r.rank,
                    "idle_ms_per_step": round(us / 1e3 / n_steps, 3),
                    "share_of_step_time": round(share, 4),
                    "op": site.op if site else None,
                },
                fix=fix,
                site=site.site if site else None,
                est_speedup=speedup_if_removed(share),
                estimate_model=_AMDAHL,
                source="trace",
            )
        ]  # one finding per id: the first rank that shows it (ranks are sorted)
    return []


@rule("dataloader-bound", reads=("source", "trace"))
def dataloader_bound(profile: Profile) -> list[Finding]:
    return _cause_finding(
        profile,
        "dataloader",
        "dataloader-bound",
        "GPU waits for the DataLoader",
        "Load batches in background workers: DataLoader(num_workers=4 or more, pin_memory=True, "
        "persistent_workers=True, prefetch_factor=2); move per-sample work out of __getitem__ "
        "hot paths.",
    )


@rule("sync-in-step", reads=("source", "trace"))
def sync_in_step(profile: Profile) -> list[Finding]:
    return _cause_finding(
        profile,
        "sync",
        "sync-in-step",
        "Host-device synchronisation inside the step leaves the GPU idle",
        "Avoid .item()/.cpu()/.tolist()/print of CUDA tensors every step: accumulate metrics on "
        "the GPU and read them every N steps; use non_blocking copies from pinned memory.",
    )


@rule("low-gpu-util", reads=("source", "trace"))
def low_gpu_util(profile: Profile) -> list[Finding]:
    for r in _ranks(profile, any_source=True):
        t = r.temporal
        idle = t.idle_pct if t is not None else None
        if t is None or idle is None or idle < LOW_UTIL_IDLE_PCT:
            continue
        causes = r.idle_causes.by_cause.items()
        top = max(causes, key=lambda kv: kv[1]) if causes else None
        summary = f"rank {r.rank}: GPU idle {fmt_pct(idle)} of {fmt_us(t.span_us)}" + (
            f"; largest host-side cause: {top[0]} ({fmt_us(top[1])})" if top and top[1] > 0 else ""
        )
        return [
            Finding(
                id="low-gpu-util",
                severity="high" if idle >= 50 else "medium",
                title="The GPU is idle for a large part of the run",
                evidence={
                    "summary": summary,
                    "rank": r.rank,
                    "idle_pct": round(idle, 2),
                    "span_ms": round(t.span_us / 1e3, 3),
                    "idle_by_cause_ms": {k: round(v / 1e3, 3) for k, v in causes},
                },
                fix="See the idle-cause table: remove the largest cause first (data loading, "
                "syncs, Python overhead between kernels).",
                source="trace",
            )
        ]
    return []


def _pageable_finding(r: TraceRank) -> Finding | None:
    rows = [m for m in r.memory if m.direction == "HtoD" and m.pageable]
    if not rows:
        return None
    count = sum(m.count for m in rows)
    nbytes = sum(m.bytes for m in rows)
    t_us = sum(m.time_us for m in rows)
    total = _step_total_us(r) or (r.temporal.span_us if r.temporal else 0) or 0
    share = t_us / total if total else 0.0
    if share < PAGEABLE_MIN_SHARE and nbytes < PAGEABLE_MIN_BYTES:
        return None  # a few tiny copies (scalars) are not worth a finding
    pinned = [m for m in r.memory if m.direction == "HtoD" and m.pageable is False]
    ev: dict[str, Any] = {
        "summary": f"rank {r.rank}: {count} host-to-device copies from pageable memory, "
        f"{fmt_bytes(nbytes)} in {fmt_us(t_us)} GPU time"
        + (f" ({nbytes / (t_us * 1e3):.1f} GB/s)" if t_us > 0 else ""),
        "rank": r.rank,
        "count": count,
        "bytes": nbytes,
        "time_ms": round(t_us / 1e3, 3),
        "bandwidth_gbps": round(nbytes / (t_us * 1e3), 3) if t_us > 0 else None,
    }
    if pinned and pinned[0].bandwidth_gbps:
        ev["pinned_bandwidth_gbps"] = round(pinned[0].bandwidth_gbps, 3)
    sites = [t for t in r.transfers if t.direction == "HtoD" and t.pageable and t.site]
    return Finding(
        id="pageable-h2d",
        severity=severity_for_share(share) if share > 0 else "low",
        title="Host-to-device copies from pageable memory (slow and blocking)",
        evidence=ev,
        fix="Use pinned memory: DataLoader(pin_memory=True) or tensor.pin_memory(), then "
        ".to(device, non_blocking=True).",
        site=max(sites, key=lambda t: t.time_us).site if sites else None,
        est_speedup=speedup_if_removed(share, keep=0.5) if share > 0 else None,
        estimate_model="Amdahl: half of the pageable copy time removed (pinned copies are ~2x "
        "faster and overlap)",
        source="trace",
    )


@rule("pageable-h2d", reads=("source", "trace"))
def pageable_h2d(profile: Profile) -> list[Finding]:
    for r in _ranks(profile):
        found = _pageable_finding(r)
        if found is not None:
            return [found]
    return []


_HOST_OVERHEAD_CAUSES = ("launch", "cpu_op", "python", "compiled_region", "untraced")


@rule("launch-bound", reads=("source", "trace"))
def launch_bound(profile: Profile) -> list[Finding]:
    for r in _ranks(profile):
        ls = r.launch
        n = ls.count
        if n < 100:
            continue
        short = ls.short_kernels / n
        causes = r.idle_causes.by_cause
        host_overhead = sum(us for c, us in causes.items() if c in _HOST_OVERHEAD_CAUSES)
        span = r.temporal.span_us if r.temporal else 0
        share = host_overhead / span if span else 0.0
        if short < LAUNCH_BOUND_SHORT_SHARE or share < MIN_CAUSE_SHARE:
            continue
        gpu_med = ls.gpu_duration_us.median
        cpu_med = ls.cpu_duration_us.median
        return [
            Finding(
                id="launch-bound",
                severity=severity_for_share(share),
                title="Kernels are too short to hide their launch cost",
                evidence={
                    "summary": f"rank {r.rank}: {100 * short:.0f}% of {n} kernels run shorter on "
                    f"the GPU than their launch takes on the CPU (median GPU {fmt_us(gpu_med)} vs "
                    f"launch {fmt_us(cpu_med)}); the GPU idles {fmt_us(host_overhead)} while "
                    "the host dispatches ops",
                    "rank": r.rank,
                    "launches": n,
                    "short_kernel_share": round(short, 3),
                    "gpu_median_us": gpu_med,
                    "cpu_launch_median_us": cpu_med,
                },
                fix="Cut per-kernel overhead: torch.compile (fuses ops), CUDA graphs "
                "(torch.compile(mode='reduce-overhead')), larger batches, foreach/fused "
                "optimizers (foreach=True, fused=True).",
                est_speedup=speedup_if_removed(share, keep=0.5),
                estimate_model="Amdahl: half of the host-overhead idle time removed",
                source="trace",
            )
        ]
    return []


@rule("straggler-rank", reads=("trace",))
def straggler_rank(profile: Profile) -> list[Finding]:
    tr = profile.trace
    if isinstance(tr, UnsetType) or isinstance(tr.straggler, UnsetType) or tr.straggler is None:
        return []
    s = tr.straggler
    ranks = {r.rank: r for r in (tr.ranks if not isinstance(tr.ranks, UnsetType) else [])}
    ev = _straggler_evidence(s, ranks)
    share = (
        ev["others_wait_s_per_step"] / ev["step_time_s"]
        if ev and ev["step_time_s"]
        else _lateness_share(s, ranks)
    )
    if share < STRAGGLER_SHARE:
        return []
    rank = ev["rank"] if ev else s.rank
    wait = float(s.wait_caused_us_total)
    summary = (
        f"rank {rank} starts collectives on average "
        f"{fmt_us(s.mean_lateness_us.get(rank, 0.0))} after the earliest rank; the other "
        f"ranks wait {fmt_us(wait)} in total over {s.collectives_compared} collectives"
    )
    if ev:
        summary += (
            f"; its own work is {fmt_us(ev['extra_s_per_step'] * 1e6)} longer a step than the "
            f"others' (most of it: {ev['top_part'] or 'spread over the parts'})"
        )
    return [
        Finding(
            id="straggler-rank",
            severity=severity_for_share(share),
            title=f"Rank {rank} is the straggler: the others wait for it at collectives",
            evidence={
                **(ev or {}),
                "summary": summary,
                "rank": rank,
                "collectives_compared": s.collectives_compared,
                "wait_ms": round(wait / 1e3, 3),
                # evidence is JSON data: keys are strings, as the document reads back
                "mean_lateness_us": {str(k): v for k, v in s.mean_lateness_us.items()},
                "source": "trace",
            },
            fix="Balance the work per rank (uneven batch sizes or sequence lengths, data loading "
            "on that rank, a slower GPU or host); compare the rank's idle-cause table with the "
            "others.",
            est_speedup=speedup_if_removed(share),
            estimate_model="Amdahl: the other ranks' wait at collectives removed",
            source="trace",
        )
    ]


def _lateness_share(s: Straggler, ranks: dict[int, TraceRank]) -> float:
    """The other ranks' wait over their step time (traces without profiler steps)."""
    others = [r for k, r in ranks.items() if k != s.rank]
    step_us = sum(_step_total_us(r) for r in others) / max(len(others), 1) if others else 0.0
    return float(s.wait_caused_us_total) / step_us if step_us > 0 else 0.0


def _straggler_evidence(s: Straggler, ranks: dict[int, TraceRank]) -> dict[str, Any] | None:
    """``straggler-rank``'s evidence in the shape run documents give it (docs/contract.md):
    each rank's own work = its mean step time less its wait at collectives; the straggler has the
    longest. None without profiler steps on every rank or without the ranks' waits."""
    steps = {k: [x for x in r.steps if x.step is not None] for k, r in ranks.items()}
    if len(ranks) < 2 or not s.wait_us or any(not v for v in steps.values()):
        return None
    step_s = {k: sum(x.dur_us for x in v) / len(v) / 1e6 for k, v in steps.items()}
    wait = {k: s.wait_us.get(k, 0.0) / len(steps[k]) / 1e6 for k in ranks}
    own = {k: step_s[k] - wait[k] for k in ranks}
    worst = max(own, key=lambda k: own[k])
    others = [k for k in ranks if k != worst]
    parts = {k: _part_seconds(steps[k], wait[k]) for k in ranks}
    extra_by_part = {
        p: round(v - _median([parts[k][p] for k in others]), 6) for p, v in parts[worst].items()
    }
    top = max(extra_by_part, key=lambda p: extra_by_part[p])
    return {
        "rank": worst,
        "extra_s_per_step": round(own[worst] - _median([own[k] for k in others]), 6),
        "others_wait_s_per_step": round(sum(wait[k] for k in others) / len(others), 6),
        "others_wait_s_total_per_step": round(sum(wait[k] for k in others), 6),
        "own_work_s_per_step": {str(k): round(v, 6) for k, v in own.items()},
        "wait_s_per_step": {str(k): round(v, 6) for k, v in wait.items()},
        "extra_by_part": extra_by_part,
        "top_part": top if extra_by_part[top] > 0 else None,
        "step_time_s": round(sum(step_s.values()) / len(step_s), 6),
        "steps_compared": min(len(v) for v in steps.values()),
    }


def _part_seconds(rows: list[StepOverview], wait_s: float) -> dict[str, float]:
    """A rank's mean seconds a step in each part of the contract's breakdown, its wait at
    collectives (seconds a step) taken out of compute, where the waiting kernels count."""
    n = len(rows)
    kernel = sum(x.kernel_us + x.memset_us + x.communication_us for x in rows)
    parts = {
        "data_wait": sum(x.dataloader_us for x in rows),
        "h2d": sum(x.memcpy_us for x in rows),
        "sync": sum(x.sync_us for x in rows),
        "compute": kernel,
    }
    parts["other"] = max(0.0, sum(x.dur_us for x in rows) - sum(parts.values()))
    out = {k: v / n / 1e6 for k, v in parts.items()}
    out["compute"] = max(0.0, out["compute"] - wait_s)
    return out


def _median(values: list[float]) -> float:
    v = sorted(values)
    n = len(v)
    return (v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2) if n else 0.0
