"""Synthetic runs for the tests of gpuopt check and compare: known per-step times, counters,
load and GPU use, so that no test depends on this machine's speed."""

from __future__ import annotations

import random
from pathlib import Path

from gpuopt.model.document import empty_profile, encode
from gpuopt.model.profile import (
    CpuUtilization,
    Finding,
    GpuRank,
    GpuSampleSummary,
    IdleSplit,
    LaunchBrief,
    MeanMax,
    MemcpyTotals,
    Profile,
    StepRecord,
    Sync,
    Transfer,
)


def run(
    times: list[float],
    waits: list[float] | None = None,
    syncs: float = 1.0,
    sync_site: str = "train.py:9",
) -> Profile:
    """A profiled run: two warm-up steps, then ``times``; 100 ops and ``syncs`` per step."""
    p = empty_profile("train.py")
    p.steps.series = [
        StepRecord(
            index=i,
            start_s=None,
            time_s=t,
            warmup=i < 2,
            data_wait_s=(waits[i] if waits else 0.0),
        )
        for i, t in enumerate(times)
    ]
    p.steps.count = len(times)
    p.dispatch.ops_per_step = 100
    p.syncs = [Sync(kind="item", site=sync_site, count_per_step=syncs)]
    p.transfers = [
        Transfer(
            direction="h2d",
            site="train.py:7",
            count_per_step=2,
            bytes_per_step=4096,
            pinned=False,
            non_blocking=False,
        )
    ]
    return p


def noisy(median: float, n: int = 40, spread: float = 0.03, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [median * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def loaded(
    p: Profile,
    other_cores: float,
    own: float = 1.0,
    cpu_count: int = 2,
    run_delay: float | None = None,
) -> Profile:
    """``p`` as if other processes kept ``other_cores`` busy while it ran (and, given, its
    threads waited ``run_delay`` of their runnable time for a core)."""
    p.utilization.cpu = CpuUtilization(
        mean=own / cpu_count * 100,
        max=100.0,
        cores_busy_mean=own,
        other_cores_busy_mean=other_cores,
    )
    if run_delay is not None:
        p.utilization.cpu.run_delay_share = run_delay
    p.utilization.cpu_count = cpu_count
    return p


def with_nvml(p: Profile, samples: list[float]) -> Profile:
    """One GPU sampled by NVML: ``samples`` in percent."""
    from gpuopt.model.profile import Timeline

    p.utilization.gpu = MeanMax(mean=sum(samples) / len(samples), max=max(samples))
    p.utilization.gpus = [GpuSampleSummary(index=0, util_mean=sum(samples) / len(samples))]
    p.utilization.timeline = Timeline(
        t_s=[0.2 * i for i in range(len(samples))],
        cpu=[50.0] * len(samples),
        gpu=list(samples),
        rss_bytes=[0] * len(samples),
    )
    p.environment.device = "cuda"
    return p


def with_ranks(p: Profile, utilization: list[float]) -> Profile:
    """A trace-like GPU entry per rank: ``utilization`` fractions."""
    p.gpu = [
        GpuRank(
            rank=i,
            device="cuda:0",
            utilization=u,
            idle_pct=(1 - u) * 100,
            compute_pct=u * 100,
            non_compute_pct=0.0,
            idle_us=IdleSplit(),
            launch=LaunchBrief(count=0, delay_median_us=None, short_kernels=0),
            memcpy=MemcpyTotals(count=0, time_us=None, bytes=0),
            comm_overlap_pct=None,
        )
        for i, u in enumerate(utilization)
    ]
    return p


def finding(
    fid: str,
    severity: str = "high",
    site: str | None = "train.py:3",
    title: str | None = None,
    est: float | None = None,
) -> Finding:
    return Finding(
        id=fid,
        severity=severity,  # type: ignore[arg-type]
        title=title or f"{fid} title",
        evidence={},
        fix="",
        site=site,
        est_speedup=est,
    )


def write(path: Path, p: Profile) -> Path:
    path.write_bytes(encode(p))
    return path
