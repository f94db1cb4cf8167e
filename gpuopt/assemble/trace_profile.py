"""A job's traces (:class:`~gpuopt.assemble.trace_job.TraceJob`: one summary per rank) as a
``gpuopt.profile/1`` :class:`Profile` (``gpuopt report TRACE``, ``gpuopt report SUMMARIES``), or
as the GPU sections of a run's profile (``gpuopt profile``'s profiler window).

Contract keys a trace cannot give stay null or empty (Python and torch versions, CPU
utilisation, Python loops). What it can give goes into the contract keys (``gpu``, ``ranks``,
``steps``, ``breakdown``, ``transfers``, ``syncs``, ``dispatch``), everything richer into
``trace`` (:class:`TraceDetails`) and, for people, into ``tables`` that every renderer shows.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import msgspec
import numpy as np

from gpuopt.assemble.trace_job import (
    Progress,
    TraceJob,
    job_filter_last,
    job_of,
    load_summaries,
    summarise_traces,
)
from gpuopt.assemble.trace_parts import (
    fixed,
    gpu_rank,
    measured_steps,
    profile_breakdown,
    rank_entry,
    rounded,
)
from gpuopt.assemble.trace_tables import trace_tables
from gpuopt.errors import GpuoptError
from gpuopt.model.document import validate
from gpuopt.model.profile import (
    CpuUtilization,
    Dispatch,
    Environment,
    GpuInfo,
    GpuRank,
    MeanMax,
    Profile,
    StepRecord,
    Steps,
    StepTimes,
    Sync,
    Transfer,
    Utilization,
)
from gpuopt.model.summary import RankSummary
from gpuopt.model.trace import SyncCall, TraceDetails
from gpuopt.stats.quantiles import median, percentile

HTA_NOTE = (
    "Definitions follow Holistic Trace Analysis 0.5 (docs/trace-metrics.md): the last profiler "
    "step is dropped when there are two or more; ns timestamps are rounded inward to whole µs."
)
UTILIZATION_NOTE = (
    "GPU: from the trace, % of the span with at least one GPU event running (mean/max over "
    "ranks); CPU utilization is not in a trace"
)
_DIRECTIONS = {"HtoD": "h2d", "DtoH": "d2h", "DtoD": "d2d"}


def profile_from_traces(
    path: Path, jobs: int | None = None, progress: Progress | None = None
) -> Profile:
    """A complete, valid profile from a trace file or a folder of per-rank traces (``jobs``:
    worker processes for a folder, None to choose), findings not yet evaluated."""
    skipped: list[str] = []
    ranks = summarise_traces(path, jobs, progress, skipped)
    return checked(build_profile(job_of(str(path), ranks, skipped)), path)


def profile_from_summaries(paths: list[Path]) -> Profile:
    """The profile of a job from its ranks' summaries (files, or folders of them), as the folder
    of traces they were made from gives it."""
    sums = load_summaries(paths)
    decided = job_filter_last(sums)
    odd = sorted(s.rank for s in sums if s.filtered_last_step != decided)
    notes = []
    if odd:
        notes.append(
            f"ranks {', '.join(map(str, odd))}: summarised with the last profiler step "
            f"{'kept' if decided else 'dropped'}, the other ranks with it "
            f"{'dropped' if decided else 'kept'} (HTA's rule is the job's: two or more "
            "ProfilerStep names between its ranks); summarise all ranks' traces together "
            "to have one rule"
        )
    label = " ".join(str(p) for p in paths)
    return checked(build_profile(job_of(label, sums, notes)), label)


def checked(profile: Profile, origin: object) -> Profile:
    problems = validate(profile)
    if problems:  # a bug, not bad input: say so plainly rather than give an invalid profile
        raise GpuoptError(f"{origin}: internal error building the report: {problems[0]}")
    return profile


def add_trace_to_profile(profile: Profile, path: Path) -> None:
    """For ``gpuopt profile`` on a GPU: add the profiler window's trace to a *run*'s profile.

    Fills ``gpu`` (contract key), replaces ``trace`` but for its ``profiler_window``, appends
    the trace ``tables`` and ``warnings``. Steps, breakdown, transfers and syncs stay the run's
    own (measured over all steps, not the window). Raises :class:`GpuoptError` on an unreadable
    trace; the caller decides whether that is a warning.
    """
    ta = job_of(str(path), summarise_traces(path, jobs=1))
    profile.gpu = _gpu(ta)
    details = _trace_details(ta)
    if not isinstance(profile.trace, msgspec.UnsetType):
        details.profiler_window = profile.trace.profiler_window
    profile.trace = details
    profile.tables = [*profile.tables, *trace_tables(ta)]
    profile.warnings = [*profile.warnings, *ta.warnings, *_warnings(ta)]


def build_profile(ta: TraceJob) -> Profile:
    """The whole profile of a job's traces (findings are the rules' to add:
    :func:`gpuopt.findings.engine.add_findings`)."""
    first = ta.ranks[0]
    n_steps = max(len(first.trace.profiler_steps), 1)
    profile = Profile(
        script=ta.path,
        argv=[],
        source="trace",
        environment=_environment(ta),
        steps=_steps(first),
        breakdown=profile_breakdown(
            first.trace.steps, first.exposed_collective_us if len(ta.ranks) > 1 else None
        ),
        utilization=_utilization(ta),
        transfers=_transfers(first, n_steps),
        syncs=_syncs(first, n_steps),
        dispatch=_dispatch(first, n_steps),
        gpu=_gpu(ta),
        ranks=[rank_entry(ra) for ra in ta.ranks] if len(ta.ranks) > 1 else None,
        memory=None,  # a trace has no memory part gpuopt reads (yet)
        compile=None,  # Dynamo's breaks and recompiles are not in a trace (docs/compile.md)
        framework=None,
        trace=_trace_details(ta),
        tables=trace_tables(ta),
        warnings=[*ta.warnings, *_warnings(ta)],
    )
    return profile


def _environment(ta: TraceJob) -> Environment:
    return Environment(
        python=None,
        torch=None,
        device="cuda" if any(ra.trace.temporal is not None for ra in ta.ranks) else "cpu",
        gpus=[
            GpuInfo(name=ra.trace.device.name, memory_bytes=ra.trace.device.memory_bytes)
            for ra in ta.ranks
            if ra.trace.device is not None
        ],
        cpu_count=None,
    )


def _utilization(ta: TraceJob) -> Utilization:
    u = [
        t.busy_us / t.span_us
        for t in (ra.trace.temporal for ra in ta.ranks)
        if t is not None and t.span_us > 0
    ]
    gpu = (
        MeanMax(mean=rounded(100 * float(np.mean(u)), 2), max=rounded(100 * float(np.max(u)), 2))
        if u
        else None
    )
    return Utilization(
        gpu=gpu,
        cpu=CpuUtilization(mean=None, max=None),
        samples=0,
        timeline=None,
        note=UTILIZATION_NOTE,
    )


def _steps(ra: RankSummary) -> Steps:
    rows = measured_steps(ra)
    times = np.array([r.dur_us for r in rows]) / 1e6
    t0 = rows[0].start_us if rows else 0.0
    series = [
        StepRecord(
            index=r.step,
            start_s=rounded((r.start_us - t0) / 1e6, 6),
            time_s=fixed(r.dur_us / 1e6, 6),
            warmup=False,
            data_wait_s=fixed(r.dataloader_us / 1e6, 6),
            h2d_s=fixed(r.memcpy_us / 1e6, 6),
            sync_s=fixed(r.sync_us / 1e6, 6),
        )
        for r in rows
        if r.step is not None  # always so for measured steps; says so to the type checker
    ]
    time_s = (
        StepTimes(
            median=rounded(median(times), 6),
            p10=rounded(percentile(times, 10), 6),
            p90=rounded(percentile(times, 90), 6),
            mean=rounded(float(times.mean()), 6),
        )
        if times.size
        else StepTimes()
    )
    return Steps(count=len(rows), measured=len(rows), warmup=0, time_s=time_s, series=series)


def _transfers(ra: RankSummary, n_steps: int) -> list[Transfer]:
    out = []
    for m in ra.trace.transfers:
        d = _DIRECTIONS.get(m.direction)
        if d is None:
            continue
        out.append(
            Transfer(
                direction=d,
                site=m.site,
                count_per_step=fixed(m.count / n_steps, 3),
                bytes_per_step=fixed(m.bytes / n_steps, 1),
                pinned=not m.pageable,
                non_blocking=not m.pageable,
                time_us_per_step=rounded(m.time_us / n_steps, 3),
                bandwidth_gbps=rounded(m.bytes / (m.time_us * 1e3), 3)
                if m.time_us > 0 and m.bytes > 0
                else None,
            )
        )
    return out


def _sync_kind(call: SyncCall) -> str:
    op = (call.outer_op or call.op or "").lower()
    for key, kind in (
        ("item", "item"),
        ("_local_scalar_dense", "item"),
        ("tolist", "tolist"),
        ("nonzero", "nonzero"),
        ("is_nonzero", "bool"),
    ):
        if key in op:
            return kind
    return "blocking_copy" if call.kind == "blocking_copy" else "synchronize"


def _syncs(ra: RankSummary, n_steps: int) -> list[Sync]:
    groups: dict[tuple[str, str | None, str, str | None], list[float]] = defaultdict(list)
    for c in ra.syncs:
        groups[(_sync_kind(c), c.site, c.api, c.outer_op)].append(c.dur_us)
    return [
        Sync(
            kind=kind,
            site=site,
            count_per_step=fixed(len(durs) / n_steps, 3),
            api=api,
            op=op,
            time_us_per_step=rounded(sum(durs) / n_steps, 3),
        )
        for (kind, site, api, op), durs in sorted(groups.items(), key=lambda kv: -sum(kv[1]))
    ]


def _dispatch(ra: RankSummary, n_steps: int) -> Dispatch:
    count = ra.host_ops
    return Dispatch(
        ops_per_step=rounded(count / n_steps, 1) if count else None,
        mean_op_us=rounded(ra.host_op_mean_us, 3) if count else None,
    )


def _gpu(ta: TraceJob) -> list[GpuRank] | None:
    return [gpu_rank(ra) for ra in ta.ranks if ra.trace.temporal is not None] or None


def _trace_details(ta: TraceJob) -> TraceDetails:
    return TraceDetails(
        path=ta.path,
        load_s=round(ta.load_s, 4),
        analyze_s=round(ta.analyze_s, 4),
        filtered_last_step=ta.filtered_last_step,
        note=HTA_NOTE,
        ranks=[ra.trace for ra in ta.ranks],
        straggler=ta.straggler,
    )


def _warnings(ta: TraceJob) -> list[str]:
    out = []
    for ra in ta.ranks:
        if ra.trace.temporal is None:
            out.append(
                f"rank {ra.rank}: no GPU events (kernels, copies, sets on a stream) in the "
                "trace: GPU metrics are empty"
            )
            continue
        if not ra.trace.profiler_steps:
            out.append(
                f"rank {ra.rank}: no ProfilerStep annotations: the breakdown covers the whole "
                "trace as one window"
            )
        short = _short_gpu_span(ra)
        if short is not None:
            out.append(short)
    return out


# GPU utilization is of the GPU's own span (first to last GPU event, HTA's): below this share
# of the measured window, the headline describes a small part of the time the breakdown covers.
SHORT_SPAN_SHARE = 0.5


def _short_gpu_span(ra: RankSummary) -> str | None:
    """Why a rank's GPU utilization and its compute share disagree: its GPU work spans a small
    part of the measured time (an inference capture: 100% busy for 0.09 ms of a 13 s step)."""
    t = ra.trace.temporal
    window = sum(r.dur_us for r in ra.trace.steps)
    if t is None or t.utilization is None or window <= 0 or t.span_us >= SHORT_SPAN_SHARE * window:
        return None
    return (
        f"rank {ra.rank}: the GPU's work spans {_ms(t.span_us)} of the {_ms(window)} measured "
        f"({100 * t.span_us / window:.1f}%): its utilization, {100 * t.utilization:.1f}%, is of "
        f"that span; over the measured time the GPU was busy {100 * t.busy_us / window:.1f}%"
    )


def _ms(us: float) -> str:
    return f"{us / 1e3:.3g} ms" if us < 1e6 else f"{us / 1e6:.3g} s"
