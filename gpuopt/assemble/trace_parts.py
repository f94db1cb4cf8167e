"""One rank's trace analysis as parts of the profile: its ``gpu[]`` and ``ranks[]`` entries and
the contract's breakdown of its steps, read from the rank's summary
(:class:`~gpuopt.model.summary.RankSummary`); and :func:`trace_rank`, the rank's
``trace.ranks[]`` entry, which the summary is built around.

Numbers are rounded here, where they enter the document (the trace records keep full precision):
percentages to 0.01, fractions to 1e-4, seconds to µs.
"""

from __future__ import annotations

import math

from msgspec import UNSET, UnsetType

from gpuopt.model.profile import Breakdown, GpuRank, IdleSplit, LaunchBrief, MemcpyTotals, RankEntry
from gpuopt.model.summary import RankSummary
from gpuopt.model.trace import StepOverview, SyncCallTotals, TraceRank
from gpuopt.stats.quantiles import median
from gpuopt.trace import kernels
from gpuopt.trace.analysis import RankAnalysis
from gpuopt.trace.idle import idle_totals


def rounded(x: float | None, nd: int = 3) -> float | None:
    """``x`` rounded to ``nd`` decimals; None for a missing or non-finite value."""
    return None if x is None or not math.isfinite(x) else round(float(x), nd)


def fixed(x: float, nd: int = 3) -> float:
    """A value that is always finite, rounded to ``nd`` decimals."""
    return round(float(x), nd)


def percent(fraction: float | None) -> float | None:
    return None if fraction is None else rounded(100.0 * fraction, 2)


def ms(us: float) -> float | None:
    """µs → ms, rounded to the µs."""
    return rounded(us / 1e3, 3)


def contract_breakdown(
    rows: list[StepOverview], collective_us: list[float] | None = None
) -> Breakdown | None:
    """The step overview mapped onto the contract's data_wait, h2d, sync, compute and other:
    fractions of the steps' time that sum to 1 (None when the steps took no time). With
    ``collective_us`` (a multi-rank job: each row's collective time with no other GPU work), a
    ``collective`` part too, taken out of compute, where the overview counts it."""
    total = sum(r.dur_us for r in rows)
    if total <= 0:
        return None
    data_wait = sum(r.dataloader_us for r in rows)
    h2d = sum(r.memcpy_us for r in rows)
    sync = sum(r.sync_us for r in rows)
    compute = sum(r.kernel_us + r.memset_us + r.communication_us for r in rows)
    coll = min(sum(collective_us), compute) if collective_us is not None else None
    if coll is not None:
        compute -= coll
    parts = [min(max(x / total, 0.0), 1.0) for x in (data_wait, h2d, sync, compute)]
    out = Breakdown(
        data_wait=parts[0],
        h2d=parts[1],
        sync=parts[2],
        compute=parts[3],
        other=max(0.0, 1.0 - sum(parts)),
    )
    if coll is not None:
        out.collective = min(max(coll / total, 0.0), 1.0)
        out.other = max(0.0, out.other - out.collective)
    return out


def gpu_rank(s: RankSummary) -> GpuRank:
    """The contract's ``gpu[]`` entry of a rank."""
    tr = s.trace
    t = tr.temporal
    it = tr.idle_totals_us
    ls = tr.launch
    return GpuRank(
        rank=s.rank,
        device=tr.device.name if tr.device is not None else None,
        utilization=rounded(t.utilization, 4) if t is not None else None,
        idle_pct=rounded(t.idle_pct, 2) if t is not None else None,
        compute_pct=rounded(t.compute_pct, 2) if t is not None else None,
        non_compute_pct=rounded(t.non_compute_pct, 2) if t is not None else None,
        idle_us=IdleSplit(
            host_wait=rounded(it.host_wait, 1),
            kernel_wait=rounded(it.kernel_wait, 1),
            other=rounded(it.other, 1),
        ),
        launch=LaunchBrief(
            count=ls.count,
            delay_median_us=rounded(ls.launch_delay_us.median, 2),
            short_kernels=ls.short_kernels,
        ),
        memcpy=MemcpyTotals(
            count=int(sum(m.count for m in tr.memory)),
            time_us=rounded(sum(m.time_us for m in tr.memory), 1),
            bytes=int(sum(m.bytes for m in tr.memory)),
        ),
        comm_overlap_pct=percent(s.comm_overlap),
    )


def measured_steps(s: RankSummary) -> list[StepOverview]:
    """The overview's rows of profiler steps (not the whole-trace row of a trace without)."""
    return [r for r in s.trace.steps if r.step is not None]


def step_time_median_s(s: RankSummary) -> float | None:
    durations = [r.dur_us for r in measured_steps(s)]
    return rounded(median(durations) / 1e6, 6) if durations else None


def collective_s_per_step(s: RankSummary) -> float | None:
    """Time in collectives (NCCL kernels, or the host inside collective ops: a CPU-only gloo
    trace has only these) per measured step."""
    return rounded(s.collective_us / max(len(measured_steps(s)), 1) / 1e6, 6)


def rank_entry(s: RankSummary) -> RankEntry:
    """The contract's ``ranks[]`` entry of a rank of a folder of traces."""
    bd = contract_breakdown(s.trace.steps, s.exposed_collective_us)
    return RankEntry(
        rank=s.rank,
        dir=s.file,
        steps=len(measured_steps(s)),
        breakdown=None if bd is None else _rounded_fractions(bd),
        collective_s_per_step=collective_s_per_step(s),
        step_time_median_s=step_time_median_s(s),
    )


def _rounded_fractions(bd: Breakdown) -> Breakdown:
    out = Breakdown(
        data_wait=fixed(bd.data_wait, 4),
        h2d=fixed(bd.h2d, 4),
        sync=fixed(bd.sync, 4),
        compute=fixed(bd.compute, 4),
        other=fixed(bd.other, 4),
    )
    if not isinstance(bd.collective, UnsetType):
        out.collective = fixed(bd.collective, 4)
    return out


def profile_breakdown(
    rows: list[StepOverview], collective_us: list[float] | None = None
) -> Breakdown:
    """The profile's breakdown (rounded; all 0 when the steps took no time): rounding must not
    push the sum past the validator's tolerance, so ``other`` takes up the difference."""
    bd = contract_breakdown(rows, collective_us)
    if bd is None:
        return Breakdown()
    out = _rounded_fractions(bd)
    total = sum(v for _, v in out.items())
    if total > 0:
        out.other = round(max(0.0, out.other + 1.0 - total), 4)
    return out


# the kernels of each type the document keeps per rank (the top-kernels table shows fewer)
TOP_KERNELS_PER_TYPE = 10


def trace_rank(ra: RankAnalysis) -> TraceRank:
    """One rank as the profile's ``trace.ranks[]`` keeps it."""
    v = ra.view
    return TraceRank(
        rank=ra.rank,
        file=ra.file,
        events=v.events_total,
        events_analysed=len(v.ev),
        device=ra.device,
        temporal=ra.temporal,
        streams=ra.streams,
        idle_by_stream=ra.idle_streams,
        idle_totals_us=idle_totals(ra.idle_streams),
        idle_causes=ra.idle_causes,
        kernel_types_us=ra.kernel_types,
        top_kernels=kernels.top_kernels(ra.kernels, TOP_KERNELS_PER_TYPE),
        launch=ra.launch_summary,
        memory=ra.memory,
        transfers=ra.transfers,
        memcpy_by_name=ra.memcpy_by_name,
        sync_calls=SyncCallTotals(
            count=len(ra.syncs), time_us=float(sum(c.dur_us for c in ra.syncs))
        ),
        comm_overlap_pct=percent(ra.comm_overlap),
        steps=ra.step_overview,
        profiler_steps=[s.number for s in v.steps],
        dropped_last_step=v.dropped_last_step.number if v.dropped_last_step else None,
        gpu_lag=UNSET if ra.gpu_lag is None else ra.gpu_lag,
    )
