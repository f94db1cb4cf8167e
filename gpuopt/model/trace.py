"""What the Kineto-trace analyses measure, per rank: the profile's ``trace`` object.

:mod:`gpuopt.trace` produces these records from a trace (times in µs, as in the trace); the
profile keeps them under ``trace.ranks[]`` for the rules, the reports and ``Profile.frames()``.
Definitions follow Holistic Trace Analysis 0.5 (docs/trace-metrics.md).
"""

from __future__ import annotations

from msgspec import UNSET, Struct, UnsetType, field

IDLE_CAUSES: tuple[str, ...] = (
    "dataloader",
    "sync",
    "optimizer",
    "launch",
    "cpu_op",
    "python",
    "compiled_region",
    "untraced",
)


class TraceRecord(Struct, kw_only=True):
    """Every record of a trace analysis: keyword construction, compared by value."""


class DeviceInfo(TraceRecord):
    name: str
    memory_bytes: int | None = None


class Temporal(TraceRecord):
    """GPU time over the span from the first GPU event to the last (HTA's temporal breakdown)."""

    span_us: float
    busy_us: float
    idle_us: float
    compute_us: float
    non_compute_us: float
    utilization: float | None
    idle_pct: float | None
    compute_pct: float | None
    non_compute_pct: float | None

    @classmethod
    def of(cls, span_us: float, busy_us: float, compute_us: float) -> Temporal:
        idle = span_us - busy_us

        def pct(v: float) -> float | None:
            return 100.0 * v / span_us if span_us > 0 else None

        non_compute = span_us - compute_us - idle
        return cls(
            span_us=span_us,
            busy_us=busy_us,
            idle_us=idle,
            compute_us=compute_us,
            non_compute_us=non_compute,
            utilization=busy_us / span_us if span_us > 0 else None,
            idle_pct=pct(idle),
            compute_pct=pct(compute_us),
            non_compute_pct=pct(non_compute),
        )


class StreamUse(TraceRecord):
    stream: int
    events: int
    busy_us: float
    span_us: float
    utilization: float | None


class GapCounts(TraceRecord):
    host_wait: int = 0
    kernel_wait: int = 0
    other: int = 0


class StreamIdle(TraceRecord):
    """Idle time between a stream's events: host wait, kernel wait (< 30 µs), other."""

    stream: int
    host_wait: float = 0.0
    kernel_wait: float = 0.0
    other: float = 0.0
    gaps: GapCounts = field(default_factory=GapCounts)


class IdleTotals(TraceRecord):
    host_wait: float = 0.0
    kernel_wait: float = 0.0
    other: float = 0.0


class CauseTimes(TraceRecord):
    """GPU idle µs by what the launching thread was doing (gpuopt.trace.idle_causes)."""

    dataloader: float = 0.0
    sync: float = 0.0
    optimizer: float = 0.0
    launch: float = 0.0
    cpu_op: float = 0.0
    python: float = 0.0
    untraced: float = 0.0
    # inside a torch.compile'd region, with nothing inside it recorded at that moment (set only
    # on traces with compiled regions, docs/trace-metrics.md)
    compiled_region: float | UnsetType = UNSET

    def items(self) -> list[tuple[str, float]]:
        """``(cause, µs)`` in :data:`IDLE_CAUSES` order; ``compiled_region`` only where set."""
        return [
            (c, float(v)) for c in IDLE_CAUSES if not isinstance(v := getattr(self, c), UnsetType)
        ]


class StepIdle(CauseTimes, kw_only=True):
    step: int
    gaps: int
    idle_us: float


class IdleSite(TraceRecord):
    cause: str
    op: str
    site: str | None
    idle_us: float


class IdleCauses(TraceRecord):
    gaps: int = 0
    idle_us: float = 0.0
    by_cause: CauseTimes = field(default_factory=CauseTimes)
    by_step: list[StepIdle] = field(default_factory=list)
    sites: list[IdleSite] = field(default_factory=list)


class KernelStat(TraceRecord):
    """One GPU event name: its type and time (µs)."""

    name: str
    type: str
    count: int
    total_us: float
    mean_us: float
    min_us: float
    max_us: float


class Distribution(TraceRecord):
    mean: float | None = None
    median: float | None = None
    p95: float | None = None
    max: float | None = None
    sum: float = 0.0


class LaunchStats(TraceRecord):
    count: int
    cpu_duration_us: Distribution
    gpu_duration_us: Distribution
    launch_delay_us: Distribution
    short_kernels: int
    runtime_outliers: int
    launch_delay_outliers: int
    runtime_outlier_us: float
    launch_delay_outlier_us: float


class MemoryOps(TraceRecord):
    """Copies and sets by direction (HtoD, DtoH, DtoD, ..., Memset) and pageable source."""

    direction: str
    pageable: bool | None
    count: int
    time_us: float
    bytes: int
    bandwidth_gbps: float | None


class TraceTransfer(TraceRecord):
    """Copies grouped by direction, pageable memory and the user's call site."""

    direction: str
    pageable: bool
    site: str | None
    count: int
    bytes: int
    time_us: float


class NameTotal(TraceRecord):
    count: int
    sum: float


class SyncCall(TraceRecord):
    """One host-blocking call: the runtime API, who issued it, how long the host waited."""

    index: int
    api: str
    kind: str  # synchronize | blocking_copy
    thread: int
    ts: float
    dur_us: float
    op: str | None
    outer_op: str | None
    site: str | None


class SyncCallTotals(TraceRecord):
    count: int
    time_us: float


class StepOverview(TraceRecord):
    """One profiler step, split as the PyTorch profiler's overview did (categories exclusive)."""

    step: int | None
    start_us: float
    dur_us: float
    kernel_us: float
    memcpy_us: float
    memset_us: float
    communication_us: float
    runtime_us: float
    sync_us: float
    dataloader_us: float
    cpu_op_us: float
    other_us: float


class GpuLag(TraceRecord):
    """A GPU that runs behind the host: every step's GPU work started only after its host step
    had ended. Steps are then measured on the GPU, by the work each one launched."""

    steps: int  # the steps compared
    lag_min_us: float  # each step's first GPU work − its host step's start, least and most
    lag_max_us: float
    queued_before: int  # GPU events whose launch precedes the trace, run before the steps' work
    gpu_step_us: float  # median time from one step's first GPU work to the next's
    host_step_us: float  # median host step (the ProfilerStep annotation)


class TraceRank(TraceRecord):
    rank: int
    file: str
    events: int
    events_analysed: int
    device: DeviceInfo | None
    temporal: Temporal | None
    streams: list[StreamUse]
    idle_by_stream: list[StreamIdle]
    idle_totals_us: IdleTotals
    idle_causes: IdleCauses
    kernel_types_us: dict[str, float]
    top_kernels: list[KernelStat]
    launch: LaunchStats
    memory: list[MemoryOps]
    transfers: list[TraceTransfer]
    memcpy_by_name: dict[str, NameTotal]
    sync_calls: SyncCallTotals
    comm_overlap_pct: float | None
    steps: list[StepOverview]
    profiler_steps: list[int]
    dropped_last_step: int | None
    gpu_lag: GpuLag | UnsetType = UNSET  # only where the GPU runs behind the host


class Straggler(TraceRecord):
    """The rank the others wait for at collectives (from the collectives' start times)."""

    rank: int
    collectives_compared: int
    mean_lateness_us: dict[int, float]
    wait_caused_us_per_collective: float
    wait_caused_us_total: float
    # each rank's wait at the compared collectives, in all (µs): at each, the last rank to start
    # waits for nobody and every other rank waits from its own start to the last one's
    wait_us: dict[int, float] = field(default_factory=dict)


class ProfilerWindowInfo(TraceRecord):
    """``gpuopt profile``'s torch.profiler window: the trace it wrote, or why it did not run."""

    file: str | UnsetType = UNSET
    cuda: bool | UnsetType = UNSET
    start_step: int | UnsetType = UNSET
    steps: int | UnsetType = UNSET
    note: str | UnsetType = UNSET


class TraceDetails(TraceRecord):
    profiler_window: ProfilerWindowInfo | UnsetType = UNSET
    path: str | UnsetType = UNSET
    load_s: float | UnsetType = UNSET
    analyze_s: float | UnsetType = UNSET
    filtered_last_step: bool | UnsetType = UNSET
    note: str | UnsetType = UNSET
    ranks: list[TraceRank] | UnsetType = UNSET
    straggler: Straggler | None | UnsetType = UNSET
