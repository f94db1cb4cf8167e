"""Run every trace analysis over a file or a folder of ranks: :func:`analyze_trace`.

The result, :class:`TraceAnalysis`, holds one :class:`RankAnalysis` per rank with plain-data
results (dicts and lists of numbers), so the profile builder, the findings and ``gpuopt
profile``'s profiler window all read the same numbers. Nothing here prints.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuopt.trace import gpu_time, idle, kernels, launch, memory
from gpuopt.trace.decode import load_columns
from gpuopt.trace.files import assign_ranks, trace_files
from gpuopt.trace.prepare import RankView, build_view, count_step_names


@dataclass
class RankAnalysis:
    rank: int
    file: str
    view: RankView
    device: dict[str, Any] | None
    temporal: gpu_time.Temporal | None
    streams: list[dict[str, Any]]
    idle_streams: list[dict[str, Any]]
    kernel_types: dict[str, float]
    kernels: list[dict[str, Any]]
    launches: launch.Launches
    launch_summary: dict[str, Any]
    memory: list[dict[str, Any]]
    memcpy_by_name: dict[str, dict[str, float]]
    transfers: list[dict[str, Any]]
    syncs: list[dict[str, Any]]
    comm_overlap: float | None
    steps: list[dict[str, Any]] = field(default_factory=list)
    step_overview: list[dict[str, Any]] = field(default_factory=list)
    idle_causes: dict[str, Any] = field(default_factory=dict)

    @property
    def has_gpu(self) -> bool:
        return self.temporal is not None


@dataclass
class TraceAnalysis:
    path: str
    ranks: list[RankAnalysis]
    load_s: float
    analyze_s: float
    filtered_last_step: bool
    warnings: list[str] = field(default_factory=list)


def analyze_trace(path: Path | str) -> TraceAnalysis:
    """Load and analyse a trace file or folder of per-rank traces (bad input: GpuoptError)."""
    p = Path(path)
    t0 = time.perf_counter()
    files = trace_files(p)
    cols = [load_columns(f) for f in files]
    ranks = assign_ranks(p, files, [c.metadata for c in cols])
    t1 = time.perf_counter()
    step_names: set[str] = set()
    for c in cols:
        step_names |= count_step_names(c)
    filter_last = len(step_names) >= 2  # HTA: only with two or more ProfilerStep names
    out: list[RankAnalysis] = []
    for f, r, c in sorted(zip(files, ranks, cols, strict=True), key=lambda x: x[1]):
        view = build_view(r, c, filter_last, source=str(f))
        out.append(analyze_view(view, str(f)))
    t2 = time.perf_counter()
    return TraceAnalysis(str(p), out, t1 - t0, t2 - t1, filter_last)


def analyze_view(view: RankView, file: str = "") -> RankAnalysis:
    """Every analysis of one rank (pure: reads the view, returns data)."""
    from gpuopt.trace import idle_causes, steps

    temporal = gpu_time.temporal_breakdown(view)
    lst = launch.launch_stats(view)
    ra = RankAnalysis(
        rank=view.rank,
        file=file,
        view=view,
        device=_device(view),
        temporal=temporal,
        streams=gpu_time.stream_utilization(view),
        idle_streams=idle.idle_by_stream(view),
        kernel_types=gpu_time.kernel_type_time(view),
        kernels=kernels.kernel_table(view),
        launches=lst,
        launch_summary=lst.summary(),
        memory=memory.memory_ops(view),
        memcpy_by_name=memory.memcpy_by_name(view),
        transfers=memory.transfers(view),
        syncs=memory.sync_calls(view),
        comm_overlap=gpu_time.comm_comp_overlap(view),
    )
    ra.step_overview = steps.step_overview(view)
    ra.idle_causes = idle_causes.idle_causes(view, ra)
    return ra


def _device(view: RankView) -> dict[str, Any] | None:
    props = view.ev.metadata.get("deviceProperties")
    if isinstance(props, list) and props and isinstance(props[0], dict):
        # the device the GPU events ran on (Kineto's GPU pid is the device index)
        return {
            "name": str(props[0].get("name", "")),
            "memory_bytes": props[0].get("totalGlobalMem"),
        }
    return None
