"""``Profile.frames()``: the document as pandas DataFrames, for notebooks (as HTA gives them).

One frame per table of the document; a frame the source cannot give (no GPU in a CPU run, no
kernels outside a trace) is empty but keeps its columns, so code written against one run works
on another. Values the document leaves unset or null are missing values (NaN/None). Units are in
the column names, as in the JSON (``_s``, ``_us``, ``_bytes``, ``_pct``; ``share``/``fraction``
are fractions of step time).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from msgspec.structs import fields

from gpuopt.model.records import (
    BREAKDOWN_PARTS,
    Breakdown,
    DataLoaderInfo,
    Finding,
    GpuRank,
    GraphBreak,
    Loop,
    MemoryByCategory,
    MemoryReport,
    RankEntry,
    Recompile,
    StepRecord,
    Sync,
    Transfer,
    given,
)
from gpuopt.model.trace import KernelStat, StepOverview, TraceRank

if TYPE_CHECKING:
    import pandas as pd

FINDING_COLUMNS = (
    "id",
    "severity",
    "title",
    "site",
    "summary",
    "est_speedup",
    "estimate_model",
    "fix",
    "source",
    "borderline",
)
GPU_COLUMNS = (
    "rank",
    "device",
    "utilization",
    "idle_pct",
    "compute_pct",
    "non_compute_pct",
    "comm_overlap_pct",
    "idle_host_wait_us",
    "idle_kernel_wait_us",
    "idle_other_us",
    "launches",
    "launch_delay_median_us",
    "short_kernels",
    "memcpy_count",
    "memcpy_time_us",
    "memcpy_bytes",
)
RANK_COLUMNS = (
    "rank",
    "dir",
    "status",
    "steps",
    "step_time_median_s",
    "collective_s_per_step",
    "collective_wait_s_per_step",
    "collective_comm_s_per_step",
    "own_work_s_per_step",
    *BREAKDOWN_PARTS,
)


def _names(record_type: type) -> tuple[str, ...]:
    """The JSON names of a record type's fields (``DataLoaderInfo.cls`` is ``class``)."""
    return tuple(f.encode_name for f in fields(record_type))


def _rows(
    records: Iterable[Any], record_type: type, prefix: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    out = []
    for r in records:
        row = dict(prefix or {})
        for f in fields(record_type):
            value = getattr(r, f.name)
            if isinstance(value, list) and value and not isinstance(value[0], (int, float)):
                value = ", ".join(map(str, value))  # e.g. a loop's helper lines, in one cell
            row[f.encode_name] = given(value)
        out.append(row)
    return out


def _frame(rows: list[dict[str, Any]], columns: Sequence[str]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(rows, columns=list(columns))


def _finding_rows(findings: list[Finding]) -> list[dict[str, Any]]:
    return [
        {
            "id": f.id,
            "severity": f.severity,
            "title": f.title,
            "site": f.site,
            "summary": f.summary,
            "est_speedup": f.est_speedup,
            "estimate_model": f.estimate_model,
            "fix": f.fix,
            "source": given(f.source) or "run",
            "borderline": given(f.borderline) is True,
        }
        for f in findings
    ]


def _gpu_rows(gpu: list[GpuRank] | None) -> list[dict[str, Any]]:
    return [
        {
            "rank": g.rank,
            "device": g.device,
            "utilization": g.utilization,
            "idle_pct": g.idle_pct,
            "compute_pct": g.compute_pct,
            "non_compute_pct": g.non_compute_pct,
            "comm_overlap_pct": g.comm_overlap_pct,
            "idle_host_wait_us": g.idle_us.host_wait,
            "idle_kernel_wait_us": g.idle_us.kernel_wait,
            "idle_other_us": g.idle_us.other,
            "launches": g.launch.count,
            "launch_delay_median_us": g.launch.delay_median_us,
            "short_kernels": g.launch.short_kernels,
            "memcpy_count": g.memcpy.count,
            "memcpy_time_us": g.memcpy.time_us,
            "memcpy_bytes": g.memcpy.bytes,
        }
        for g in gpu or []
    ]


def _rank_rows(ranks: list[RankEntry] | None) -> list[dict[str, Any]]:
    rows = []
    for r in ranks or []:
        row: dict[str, Any] = {
            "rank": r.rank,
            "dir": r.dir,
            "status": given(r.status),
            "steps": r.steps,
            "step_time_median_s": given(r.step_time_median_s),
            "collective_s_per_step": r.collective_s_per_step,
            "collective_wait_s_per_step": given(r.collective_wait_s_per_step),
            "collective_comm_s_per_step": given(r.collective_comm_s_per_step),
            "own_work_s_per_step": given(r.own_work_s_per_step),
        }
        row.update(
            {k: given(getattr(r.breakdown, k)) if r.breakdown else None for k in BREAKDOWN_PARTS}
        )
        rows.append(row)
    return rows


@dataclass(frozen=True)
class FrameSources:
    """What a profile's frames are made of (:meth:`gpuopt.model.profile.Profile.frames` fills it
    from its own fields; this module needs nothing else of the Profile)."""

    series: list[StepRecord]
    breakdown: Breakdown
    transfers: list[Transfer]
    syncs: list[Sync]
    loops: list[Loop]
    findings: list[Finding]
    gpu: list[GpuRank] | None
    dataloaders: list[DataLoaderInfo]
    ranks: list[RankEntry] | None
    trace_ranks: list[TraceRank]
    memory: MemoryReport | None = None
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    recompiles: list[Recompile] = field(default_factory=list)


MEMORY_COLUMNS = ("source", "category", "bytes", "share", "batch_size")


def _memory_rows(memory: MemoryReport | None) -> list[dict[str, Any]]:
    """One row per category of the measured split and of the predicted one (``source``:
    "measured" or "predicted"); ``share`` is of that split's total."""
    if memory is None:
        return []
    parts: list[tuple[str, MemoryByCategory, int | None]] = []
    if memory.measured is not None and memory.measured.by_category is not None:
        parts.append(("measured", memory.measured.by_category, None))
    p = memory.predicted
    if p is not None and p.by_category is not None:
        parts.append(("predicted", p.by_category, p.batch_size))
    rows = []
    for source, split, batch in parts:
        total = split.total()
        for category, n in split.items():
            share = n / total if total else None
            rows.append(
                {
                    "source": source,
                    "category": category,
                    "bytes": n,
                    "share": share,
                    "batch_size": batch,
                }
            )
    return rows


def frames_of(src: FrameSources) -> dict[str, pd.DataFrame]:
    """See :meth:`gpuopt.model.profile.Profile.frames`."""
    trace_ranks = src.trace_ranks
    kernels = [
        r for tr in trace_ranks for r in _rows(tr.top_kernels, KernelStat, {"rank": tr.rank})
    ]
    trace_steps = [
        r for tr in trace_ranks for r in _rows(tr.steps, StepOverview, {"rank": tr.rank})
    ]
    idle = [
        {"rank": tr.rank, "cause": cause, "idle_us": us}
        for tr in trace_ranks
        for cause, us in tr.idle_causes.by_cause.items()
    ]
    return {
        "steps": _frame(_rows(src.series, StepRecord), _names(StepRecord)),
        "breakdown": _frame(
            [{"part": k, "fraction": v} for k, v in src.breakdown.items()],
            ("part", "fraction"),
        ),
        "transfers": _frame(_rows(src.transfers, Transfer), _names(Transfer)),
        "syncs": _frame(_rows(src.syncs, Sync), _names(Sync)),
        "loops": _frame(_rows(src.loops, Loop), _names(Loop)),
        "findings": _frame(_finding_rows(src.findings), FINDING_COLUMNS),
        "gpu": _frame(_gpu_rows(src.gpu), GPU_COLUMNS),
        "dataloaders": _frame(_rows(src.dataloaders, DataLoaderInfo), _names(DataLoaderInfo)),
        "ranks": _frame(_rank_rows(src.ranks), RANK_COLUMNS),
        "kernels": _frame(kernels, ("rank", *_names(KernelStat))),
        "trace_steps": _frame(trace_steps, ("rank", *_names(StepOverview))),
        "idle_causes": _frame(idle, ("rank", "cause", "idle_us")),
        "memory": _frame(_memory_rows(src.memory), MEMORY_COLUMNS),
        "graph_breaks": _frame(_rows(src.graph_breaks, GraphBreak), _names(GraphBreak)),
        "recompiles": _frame(_rows(src.recompiles, Recompile), _names(Recompile)),
    }
