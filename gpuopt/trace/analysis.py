"""Run every trace analysis over one rank's columns: :func:`analyze_columns`.

The result, :class:`RankAnalysis`, holds the typed records of :mod:`gpuopt.model.trace` (the
rank's view, numpy columns, stays beside them). A job's ranks are analysed one by one into rank
summaries (:mod:`gpuopt.assemble.rank_summary`, :mod:`gpuopt.assemble.trace_job`), which
``gpuopt report``, the findings and ``gpuopt profile``'s profiler window all read. Nothing here
prints.
"""

from __future__ import annotations

import msgspec

from gpuopt.model.trace import (
    DeviceInfo,
    GpuLag,
    IdleCauses,
    KernelStat,
    LaunchStats,
    MemoryOps,
    NameTotal,
    StepOverview,
    StreamIdle,
    StreamUse,
    SyncCall,
    Temporal,
    TraceTransfer,
)
from gpuopt.trace import cpu_ops, gpu_time, idle, kernels, launch, memory
from gpuopt.trace.columns import EventColumns
from gpuopt.trace.prepare import RankView, build_view, count_step_names


class RankAnalysis(msgspec.Struct):
    rank: int
    file: str
    view: RankView
    device: DeviceInfo | None
    temporal: Temporal | None
    streams: list[StreamUse]
    idle_streams: list[StreamIdle]
    kernel_types: dict[str, float]
    kernels: list[KernelStat]
    launch_summary: LaunchStats
    memory: list[MemoryOps]
    memcpy_by_name: dict[str, NameTotal]
    transfers: list[TraceTransfer]
    syncs: list[SyncCall]
    comm_overlap: float | None  # a fraction of the communication time
    communication_us: float  # time with a communication kernel running
    collective_us: float  # ... or a training thread inside a collective op (their union)
    host_ops: cpu_ops.HostOps
    step_overview: list[StepOverview] = msgspec.field(default_factory=list)
    idle_causes: IdleCauses = msgspec.field(default_factory=IdleCauses)
    # per step_overview row: collective time with no other GPU work running (steps.py)
    exposed_collective_us: list[float] = msgspec.field(default_factory=list)
    gpu_lag: GpuLag | None = None  # where the GPU runs behind the host

    @property
    def has_gpu(self) -> bool:
        return self.temporal is not None

    @property
    def measured_steps(self) -> list[StepOverview]:
        """The overview's rows of profiler steps (not the whole-trace row of a trace without)."""
        return [s for s in self.step_overview if s.step is not None]


def analyze_columns(
    cols: EventColumns, rank: int, filter_last: bool | None, file: str
) -> RankAnalysis:
    """Every analysis of one file's columns (``filter_last``: HTA's last-step rule, None for the
    file's own decision: two or more ProfilerStep names)."""
    if filter_last is None:
        filter_last = len(count_step_names(cols)) >= 2
    return analyze_view(build_view(rank, cols, filter_last, source=file), file)


def time_range(view: RankView) -> tuple[float, float] | None:
    """First start to last end of a rank's events (µs); None for a rank without events."""
    return _time_range(view) if len(view.ts) else None


def _time_range(view: RankView) -> tuple[float, float]:
    """First start to last end of a rank's events (µs)."""
    return float(view.ts.min()), float(view.end.max())


def skew_warning(ranks: list[int], gap_us: float) -> str:
    names = ", ".join(str(r) for r in ranks)
    return (
        f"rank{'s' if len(ranks) > 1 else ''} {names}: no event at the same time as any other "
        f"rank's (apart by {gap_us / 1e6:.3g} s or more): clock skew between the hosts, or "
        "traces of different runs; the straggler analysis, which compares the ranks' clocks, "
        "is left out"
    )


def analyze_view(view: RankView, file: str = "") -> RankAnalysis:
    """Every analysis of one rank (pure: reads the view, returns data)."""
    from gpuopt.trace import gpu_lag, idle_causes, steps

    syncs = memory.sync_calls(view)
    return RankAnalysis(
        rank=view.rank,
        file=file,
        view=view,
        device=_device(view),
        temporal=gpu_time.temporal_breakdown(view),
        streams=gpu_time.stream_utilization(view),
        idle_streams=idle.idle_by_stream(view),
        kernel_types=gpu_time.kernel_type_time(view),
        kernels=kernels.kernel_table(view),
        launch_summary=launch.launch_stats(view).summary(),
        memory=memory.memory_ops(view),
        memcpy_by_name=memory.memcpy_by_name(view),
        transfers=memory.transfers(view),
        syncs=syncs,
        comm_overlap=gpu_time.comm_comp_overlap(view),
        communication_us=gpu_time.communication_us(view),
        collective_us=steps.collective_us(view),
        exposed_collective_us=steps.exposed_collective_us(view),
        host_ops=cpu_ops.host_ops(view),
        step_overview=steps.step_overview(view),
        idle_causes=idle_causes.idle_causes(view, syncs),
        gpu_lag=gpu_lag.gpu_lag(view),
    )


def _device(view: RankView) -> DeviceInfo | None:
    props = view.ev.metadata.get("deviceProperties")
    if isinstance(props, list) and props and isinstance(props[0], dict):
        # the device the GPU events ran on (Kineto's GPU pid is the device index)
        name = props[0].get("name", "")
        mem = props[0].get("totalGlobalMem")
        return DeviceInfo(
            name=name if isinstance(name, str) else "",
            memory_bytes=mem
            if isinstance(mem, int) and not isinstance(mem, bool) and 0 <= mem < 1 << 63
            else None,
        )
    return None
