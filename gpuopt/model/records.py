"""The records a profile document is made of: steps, breakdown, utilization, copies, syncs,
dispatch, loops, findings, GPU ranks, DataLoaders, batch shapes, distributed runs (collectives,
DDP's gradient buckets, the Ring-AllReduce estimate, the straggler's evidence).
:class:`gpuopt.model.profile.Profile` puts them together; see there for what a field typed
``X | UnsetType`` means. Units are in the names: ``_s`` seconds, ``_us`` microseconds, ``_bytes``
bytes, ``_pct`` percent (0-100); ``share`` and the breakdown are fractions of measured step time
(0-1).
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from msgspec import UNSET, Struct, UnsetType, field

T = TypeVar("T")

SCHEMA = "gpuopt.profile/1"

Status = Literal["ok", "error", "interrupted"]
Severity = Literal["high", "medium", "low"]
Source = Literal["run", "trace"]
# Per-step figures: an int when the recorder counted an exact whole number per step.
Count = int | float
# A cell of a generic table.
Scalar = str | int | float | bool | None
# What a rule measured for a finding: named numbers (and a few lists and names) plus ``summary``.
Evidence = dict[str, Any]


class Record(Struct, kw_only=True):
    """Every record of the document: keyword construction, compared by value."""


def given(value: T | UnsetType) -> T | None:
    """The value of a field, None where the document does not have the key (an unset field)."""
    return None if isinstance(value, UnsetType) else value


def set_fields(record: Struct) -> list[tuple[str, Any]]:
    """``(JSON name, value)`` of every field the document has, in definition order (unset fields
    left out; an explicit null stays, as None)."""
    names = record.__struct_fields__
    keys = record.__struct_encode_fields__
    return [
        (key, value)
        for name, key in zip(names, keys, strict=True)
        if (value := getattr(record, name)) is not UNSET
    ]


class RunError(Record):
    type: str
    message: str


class GpuInfo(Record):
    name: str
    memory_bytes: int | None = None


class Environment(Record):
    python: str | None = None
    torch: str | None = None
    device: str = "cpu"
    gpus: list[GpuInfo] = field(default_factory=list)
    cpu_count: int | None = None
    platform: str | UnsetType = UNSET
    torch_threads: int | UnsetType = UNSET  # torch.get_num_threads(): intra-op threads


class StepTimes(Record):
    median: float | None = None
    p10: float | None = None
    p90: float | None = None
    mean: float | None = None


class StepRecord(Record):
    """One step, warm-up included: ``start_s`` is seconds since the run (or trace) started."""

    index: int
    start_s: float | None
    time_s: float
    warmup: bool = False
    data_wait_s: float | UnsetType = UNSET
    h2d_s: float | UnsetType = UNSET
    sync_s: float | UnsetType = UNSET
    instrumented: bool | UnsetType = UNSET
    # multi-rank runs: the time this rank's code was blocked in collectives during the step
    # (explicit calls' time in the call or in ``work.wait()``, DDP's gradient all-reduce after
    # backward's compute ended: the part not overlapped)
    collective_s: float | UnsetType = UNSET


class SlowStep(Record):
    """A step far slower than the steps before it, and what the training thread's stack samples
    show it doing (``gpuopt.probes.slow_steps``): the user's line its time went under, with
    that line's text, a label where the names on its stacks say one (``sampling``,
    ``evaluation``, ``checkpointing``), the innermost frames seen most (``file:line
    (function)``), the samples taken in the step and how many of them were under the line, and
    how many showed only the frames of the usual steps (a step slowed by a busy machine, not by
    work of its own)."""

    index: int
    site: str | None = None
    code: str | None = None
    kind: str | None = None
    calls: list[str] = field(default_factory=list)
    samples: int = 0
    at_site: int = 0
    usual_samples: int = 0


class Steps(Record):
    count: int = 0
    measured: int = 0
    warmup: int = 0
    time_s: StepTimes = field(default_factory=StepTimes)
    marked_by: list[str] | UnsetType = UNSET
    instrumented: list[int] | UnsetType = UNSET
    series: list[StepRecord] = field(default_factory=list)
    # the step boundary the run used: "optimizer.step" / "loss.backward" / "gpuopt.step"
    marker: str | UnsetType = UNSET
    # steps far slower than those before them, with what they did (a run's, not a trace's)
    slow: list[SlowStep] | UnsetType = UNSET


class Breakdown(Record):
    """Fractions of measured step time; they sum to 1 (all 0 when nothing was measured).

    ``collective`` is only on multi-rank runs: the time blocked in collectives (communicating and
    waiting for slower ranks), which "compute" and "other" would otherwise swallow."""

    data_wait: float = 0.0
    h2d: float = 0.0
    sync: float = 0.0
    compute: float = 0.0
    other: float = 0.0
    collective: float | UnsetType = UNSET

    def items(self) -> list[tuple[str, float]]:
        """``(key, fraction)`` of every part the breakdown has (``collective`` where set)."""
        out = [(k, getattr(self, k)) for k in BREAKDOWN_KEYS]
        if not isinstance(self.collective, UnsetType):
            out.append(("collective", self.collective))
        return out


BREAKDOWN_KEYS: tuple[str, ...] = ("data_wait", "h2d", "sync", "compute", "other")
# every part a breakdown may have: ``collective`` on multi-rank runs only
BREAKDOWN_PARTS: tuple[str, ...] = (*BREAKDOWN_KEYS, "collective")


class MeanMax(Record):
    """Utilization in percent (0-100)."""

    mean: float | None = None
    max: float | None = None


class CpuUtilization(Record):
    mean: float | None = None
    max: float | None = None
    cores_busy_mean: float | None | UnsetType = UNSET
    # cores kept busy by other processes on the machine (not this run's tree), mean over samples
    other_cores_busy_mean: float | None | UnsetType = UNSET
    # the training process's threads' wait for a core (gpuopt.probes.contention), as a share of
    # their runnable time, and as threads waiting on average; absent without schedstat
    run_delay_share: float | UnsetType = UNSET
    run_delay_cores: float | UnsetType = UNSET


class Timeline(Record):
    """Background samples: ``cpu``/``gpu`` in percent, memory in bytes."""

    t_s: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    gpu: list[float | None] | None = None
    rss_bytes: list[int] = field(default_factory=list)
    gpu_memory_bytes: list[int | None] | None = None


class GpuSampleSummary(Record):
    """One GPU's NVML samples over the run."""

    index: int
    util_mean: float | None = None
    memory_used_max_bytes: int | None = None
    power_w_mean: float | None = None
    sm_clock_mhz_mean: float | None = None
    process_util_mean: float | None = None


class Utilization(Record):
    gpu: MeanMax | None = None
    cpu: CpuUtilization = field(default_factory=CpuUtilization)
    samples: int = 0
    timeline: Timeline | None = None
    interval_s: float | UnsetType = UNSET
    cpu_count: int | UnsetType = UNSET
    note: str | UnsetType = UNSET
    gpus: list[GpuSampleSummary] | UnsetType = UNSET


class Transfer(Record):
    """Copies between devices at one site, per step."""

    direction: str  # h2d | d2h | d2d
    site: str | None
    count_per_step: Count
    bytes_per_step: Count
    pinned: bool | None
    non_blocking: bool | None
    src_device: str | UnsetType = UNSET
    dst_device: str | UnsetType = UNSET
    api: str | UnsetType = UNSET
    time_us_per_step: float | None | UnsetType = UNSET
    time_share: float | UnsetType = UNSET
    bandwidth_gbps: float | None | UnsetType = UNSET
    # time_share of each recorded step (findings draw their interval from them)
    time_share_steps: list[float] | UnsetType = UNSET


class Sync(Record):
    """Calls that make the host wait for the device, at one site, per step."""

    kind: str  # item, tolist, cpu, numpy, bool, nonzero, synchronize, blocking_copy, ...
    site: str | None
    count_per_step: Count
    api: str | UnsetType = UNSET
    op: str | None | UnsetType = UNSET
    measured_device: str | UnsetType = UNSET
    would_block_on_gpu: bool | UnsetType = UNSET
    time_us_per_step: float | None | UnsetType = UNSET
    idle_after_us_per_step: float | UnsetType = UNSET
    time_share: float | UnsetType = UNSET
    idle_after_share: float | UnsetType = UNSET
    # the innermost loop (its header line) or else the function (its def line) the site runs in
    scope: str | UnsetType = UNSET
    scope_kind: str | UnsetType = UNSET  # for, while, comprehension, function, module
    # the shares of each recorded step (findings draw their interval from them)
    time_share_steps: list[float] | UnsetType = UNSET
    idle_after_share_steps: list[float] | UnsetType = UNSET
    # a read a training framework's code made (docs/frameworks.md): the framework, its line
    # (``transformers/trainer.py:1914``) and function; ``site`` is then the user's line that led
    # there (``trainer.train()``); ``knob`` the framework's setting that removes the read
    # (``logging_nan_inf_filter``), where one does
    framework: str | UnsetType = UNSET
    library_site: str | UnsetType = UNSET
    library_function: str | UnsetType = UNSET
    knob: str | UnsetType = UNSET


class TopSite(Record):
    site: str
    ops_per_step: Count
    time_share: float


class HandWrittenOp(Record):
    """A hand-written op chain torch has one op for (a GELU, softmax, layer norm or attention
    written as elementwise ops), at a line whose ops the recorder counted in its window."""

    site: str  # where the expression starts
    kind: str  # gelu-tanh, gelu-erf, softmax, layer-norm, attention
    code: str  # the expression as written, on one line
    replacement: str | None  # torch's one op (None: the module cannot reach torch)
    ops_per_step: Count  # ops the recorder counted on the expression's lines
    time_share: float  # their host time (ops and the time before each), of the step


class OutsideSite(Record):
    """Where the window's time outside tensor ops went (a sleep, a blocking read, Python work
    that issues no op), from the gap sampler: ``site`` is the user's line (where the fix goes),
    ``frame`` the innermost Python frame running (the line itself for a C call it made, such as
    ``time.sleep``); the time is the recorder's measured outside-ops time, split as the samples
    fell."""

    site: str
    frame: str
    time_us_per_step: float
    time_share: float
    samples: int


class Dispatch(Record):
    """Host-side op dispatch measured by the recorder's window (docs/host-culprits.md)."""

    ops_per_step: Count | None = None
    mean_op_us: float | None = None
    mean_op_us_raw: float | None | UnsetType = UNSET
    between_ops_share: float | UnsetType = UNSET
    between_ops_step_share: float | UnsetType = UNSET
    op_time_share: float | UnsetType = UNSET
    host_dispatch_share: float | UnsetType = UNSET
    tiny_ops_per_step: Count | UnsetType = UNSET
    tiny_op_us: float | UnsetType = UNSET
    view_ops_per_step: Count | UnsetType = UNSET
    data_ops_per_step: Count | UnsetType = UNSET
    torch_function_calls_per_step: Count | UnsetType = UNSET
    step_time_us: float | UnsetType = UNSET
    step_time_source: str | UnsetType = UNSET
    step_time_us_raw: float | UnsetType = UNSET
    step_time_capped_steps: int | UnsetType = UNSET  # window steps capped at their neighbours
    between_ops_us_per_step: float | UnsetType = UNSET
    op_time_us_per_step: float | UnsetType = UNSET
    data_wait_us_per_step: float | UnsetType = UNSET
    data_wait_source: str | UnsetType = UNSET
    sync_us_per_step: float | UnsetType = UNSET
    sync_share: float | UnsetType = UNSET
    # one rank of several: the window's time blocked in collectives, out of between ops
    collective_us_per_step: float | UnsetType = UNSET
    h2d_us_per_step: float | UnsetType = UNSET
    h2d_share: float | UnsetType = UNSET
    window_start: int | UnsetType = UNSET
    window_steps: int | UnsetType = UNSET
    window_partial: bool | UnsetType = UNSET
    measured_device: str | UnsetType = UNSET
    recorder_overhead_us_per_op: float | UnsetType = UNSET
    recorder_own_us_per_op: float | UnsetType = UNSET
    recorder_function_entry_us: float | UnsetType = UNSET
    recorder_dispatch_entry_us: float | UnsetType = UNSET
    recorder_passthrough_us: float | UnsetType = UNSET
    recorder_inflation_us: float | UnsetType = UNSET
    recorder_trivial_op_us: float | UnsetType = UNSET
    recorder_overhead_share: float | UnsetType = UNSET
    # a trivial op called from user code without the recorder, measured at the end of the run
    calibrated_op_us: float | UnsetType = UNSET
    note: str | UnsetType = UNSET
    top_sites: list[TopSite] | UnsetType = UNSET
    hand_written_ops: list[HandWrittenOp] | UnsetType = UNSET  # op chains torch has one op for
    # host_dispatch_share and op_time_share of each window step (findings' intervals)
    host_dispatch_share_steps: list[float] | UnsetType = UNSET
    op_time_share_steps: list[float] | UnsetType = UNSET
    # time in stretches without a tensor op longer than ``outside_ops_min_us`` (a sleep, a
    # blocking read, Python work that issues no op), data, sync and collective waits left out:
    # part of ``between_ops`` (and of ``breakdown.other``), never of ``host_dispatch_share``
    outside_ops_us_per_step: float | UnsetType = UNSET
    outside_ops_share: float | UnsetType = UNSET
    outside_ops_min_us: float | UnsetType = UNSET
    outside_ops_sites: list[OutsideSite] | UnsetType = UNSET
    # outside_ops_share of each window step
    outside_ops_share_steps: list[float] | UnsetType = UNSET
    # the gap sampler's own time at named lines, per window step, not scaled to the measured
    # outside-ops time (``gpuopt check``'s outside-ops gate)
    outside_ops_named_us_per_step: float | UnsetType = UNSET
    # that named time in each window step, of the stretches that recur at their place in most
    # window steps (the gate takes their median: a stall in one step, a collection or the
    # process descheduled, and stalls each at its own place in every step, are no change)
    outside_ops_named_us_steps: list[float] | UnsetType = UNSET


class Loop(Record):
    """A Python loop that issues many small tensor ops, per step."""

    site: str
    ops_per_step: Count
    iterations_per_step: Count
    kind: str | UnsetType = UNSET
    code: str | UnsetType = UNSET
    indexing_ops_per_step: Count | UnsetType = UNSET
    ops_per_iteration: float | None | UnsetType = UNSET
    time_us_per_step: float | UnsetType = UNSET
    time_share: float | UnsetType = UNSET
    through: list[str] | UnsetType = UNSET  # the helper lines that issue the loop's ops
    # time_share of each recorded step (findings draw their interval from them)
    time_share_steps: list[float] | UnsetType = UNSET


class EvidenceInterval(Record):
    """A finding's main evidence with its 90% interval (``gpuopt.findings.evidence``): within-run
    variation of ``steps`` per-step values plus a run-to-run drift; a share of step time."""

    metric: str  # the evidence key it is the interval of, e.g. "data_wait_share"
    value: float
    low: float
    high: float
    level: float
    steps: int  # per-step values it was drawn from (0: the drift alone)
    covers: str


class Finding(Record):
    """One diagnosed cause of idle GPU time, with the measured evidence and a concrete fix.

    ``est_speedup`` is an estimate (whole-step speedup if the cause were removed) and
    ``estimate_model`` says how it was estimated; reports label it as such.
    """

    id: str
    severity: Severity
    title: str
    evidence: Evidence
    fix: str
    site: str | None = None
    est_speedup: float | None = None
    estimate_model: str | None = None
    source: str | UnsetType = UNSET  # "trace": found in a Kineto trace
    fix_params: dict[str, str] | UnsetType = UNSET  # the knobs and values of the fix
    # the main evidence's interval, where the rule has per-step values; a finding
    # within noise of its threshold or of HIGH's is borderline, and never HIGH
    interval: EvidenceInterval | UnsetType = UNSET
    borderline: bool | UnsetType = UNSET

    @property
    def summary(self) -> str:
        s = self.evidence.get("summary")
        return s if isinstance(s, str) else ""


class IdleSplit(Record):
    """GPU idle time in µs, as HTA splits it."""

    host_wait: float | None = None
    kernel_wait: float | None = None
    other: float | None = None


class LaunchBrief(Record):
    count: int
    delay_median_us: float | None
    short_kernels: int


class MemcpyTotals(Record):
    count: int
    time_us: float | None
    bytes: int


class GpuRank(Record):
    """One rank's GPU time from a Kineto trace (the contract's ``gpu[]``)."""

    rank: int
    device: str | None
    utilization: float | None  # a fraction of the span with a GPU event running
    idle_pct: float | None
    compute_pct: float | None
    non_compute_pct: float | None
    idle_us: IdleSplit
    launch: LaunchBrief
    memcpy: MemcpyTotals
    comm_overlap_pct: float | None


class RankEntry(Record):
    """One rank of a multi-process run or of a folder of per-rank traces.

    Per-step times are means over the rank's measured steps. ``collective_s_per_step`` is the
    time the rank was blocked in collectives; it splits into ``collective_wait_s_per_step``
    (waiting for slower ranks to arrive) and ``collective_comm_s_per_step`` (communicating),
    computed when the ranks are merged (docs/distributed.md: the rank that arrives last at a
    collective waits for nobody; each other rank's extra blocked time is waiting).
    ``own_work_s_per_step`` is the rank's step time less its wait: what the straggler rule
    compares."""

    rank: int
    dir: str
    steps: int
    breakdown: Breakdown | None
    collective_s_per_step: float | None = None
    status: Status | UnsetType = UNSET
    step_time_median_s: float | None | UnsetType = UNSET
    # Read from documents written before the typed document (trace folders wrote this name),
    # never written.
    step_time_s_median: float | None | UnsetType = UNSET
    step_time_mean_s: float | None | UnsetType = UNSET
    collective_wait_s_per_step: float | None | UnsetType = UNSET
    collective_comm_s_per_step: float | None | UnsetType = UNSET
    own_work_s_per_step: float | None | UnsetType = UNSET
    exit_code: int | None | UnsetType = UNSET  # None: the rank exec'd another program
    error: RunError | UnsetType = UNSET  # how the rank failed (also: it wrote no profile)
    node_rank: int | None | UnsetType = UNSET  # torchrun's GROUP_RANK: the node it ran on
    local_rank: int | None | UnsetType = UNSET
    hostname: str | None | UnsetType = UNSET

    def __post_init__(self) -> None:
        if not isinstance(self.step_time_s_median, UnsetType):
            if isinstance(self.step_time_median_s, UnsetType):
                self.step_time_median_s = self.step_time_s_median
            self.step_time_s_median = UNSET


class RankSpread(Record):
    slowest_rank: int
    fastest_rank: int
    ratio: float


class Table(Record):
    """A table any analysis may add; every renderer shows it."""

    id: str
    title: str
    columns: list[str]
    rows: list[list[Scalar]]
    note: str = ""


class DataLoaderInfo(Record):
    """One DataLoader the run iterated: its settings and the time the loop waited on it."""

    site: str | None
    cls: str = field(name="class")
    dataset: str
    batch_size: int | None
    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None
    multiprocessing_context: str | None
    epochs: int
    batches: int
    wait_s_total: float
    wait_s_per_step: float | None
    built_at: str | UnsetType = UNSET  # the DataLoader(...) call: where its settings are written
    built_via: str | UnsetType = UNSET  # the call of the factory that built it, if one did
    # a loader a framework built (the HF Trainer's): the call whose arguments set it
    # ("TrainingArguments", at built_at; built_via the user's line into the framework)
    settings_call: str | UnsetType = UNSET
    # the installed packages' functions that built it, innermost first (a framework's:
    # "Trainer._get_dataloader", "Trainer.get_eval_dataloader")
    built_in: list[str] | UnsetType = UNSET
    role: str | UnsetType = UNSET  # "eval": every batch fetched with autograd off; else "train"
    # epochs after the first that started non-persistent workers again, and their wait (iter()
    # and the first batch) beyond a batch's usual wait, per measured step
    worker_restarts: int | UnsetType = UNSET
    restart_s_per_step: float | UnsetType = UNSET
    # num_workers=0: its first fetches' CPU time over their time not waiting for a core (near 1:
    # it computes; near 0: it waits, on I/O or a sleep)
    fetch_cpu_share: float | UnsetType = UNSET


class ShapeCount(Record):
    shapes: str
    batches: int


class RaggedLoader(Record):
    """One DataLoader's batch shapes (``ragged.loaders``)."""

    site: str | None  # the loop that fetched its batches
    role: str  # "train", or "eval": fetched with autograd off (torch.no_grad, inference_mode)
    batches: int
    batch_sizes: list[int]
    distinct_shapes: int


class Ragged(Record):
    """Batch-shape statistics over the training batches (evaluation loaders' batches are left
    out: ``loaders`` has each loader's own), padding over the recorder's window."""

    batches: int
    steps_observed: int
    distinct_shapes: int
    new_shape_share: float | None
    batch_size: int | None
    batch_sizes: list[int]
    variable_dims: list[str]
    variable_batch_size: bool
    list_batches: int
    batch_size_1_variable: bool
    pad_fraction: float | None
    pad_tensor: str | None
    padded_batches_scanned: int
    top_shapes: list[ShapeCount]
    step_signatures_distinct: int | UnsetType = UNSET
    step_signatures_steps: int | UnsetType = UNSET
    note: str | UnsetType = UNSET
    loaders: list[RaggedLoader] | UnsetType = UNSET
    # the samples in the training batches (in runs that record their training, --record-losses:
    # gpuopt optimize compares a fix that changes the batch size in samples per second)
    samples: int | UnsetType = UNSET


class TrainingRecord(Record):
    """What a run trained, read once at its end (never a sync per step): every recorded
    ``loss.backward()``'s loss in order, and a digest of the optimizers' parameters after the
    last step."""

    losses: list[float] = field(default_factory=list)
    param_digest: str | None = None  # sha256 over every parameter's bytes, optimizer order
    param_count: int = 0  # parameter tensors in the digest
    param_norm: float | None = None  # float64 L2 norm of all of them (for tolerance checks)
    seed: int | None = None  # the seed gpuopt set before the script ran (--seed), if any
    note: str | None = None  # what could not be recorded, if anything


# -- distributed runs (docs/distributed.md) ------------------------------------------------------


class CollectiveOp(Record):
    """One kind of collective a rank ran: the same op from the same origin and site, per
    measured step. ``time_s_per_step`` is launch to completion (summed over calls; time that
    overlapped the rank's own work included); ``blocked_s_per_step`` is the part the calling
    thread could not go on (the step's exposed time). ``source`` says how it was timed: "host"
    (the call, ``work.wait()`` and the completion callback on the host: gloo and every CPU
    backend) or "nccl-work" (NCCL's own GPU timing of each work, ``TORCH_NCCL_ENABLE_TIMING``;
    GPU-only)."""

    op: str  # all_reduce, all_gather, reduce_scatter, broadcast, barrier, all_to_all, send ...
    origin: str  # "ddp" (its gradient all-reduce), "fsdp", "explicit" (the script's), "torch"
    site: str | None  # the script's line (explicit), the DDP(...)/FSDP(...) call, or None
    backend: str | None
    group_size: int | None
    calls_per_step: Count
    bytes_per_step: Count
    time_s_per_step: float | None
    blocked_s_per_step: float | None
    source: str = "host"


class DdpModel(Record):
    """One DistributedDataParallel model on one rank: its gradient buckets and how their
    all-reduce overlapped backward, per measured step. ``bucket_time_s`` is each bucket's median
    launch-to-completion time on this rank (waiting for other ranks included: the merge takes,
    per bucket, the rank that arrived last). ``exposed_s_per_step``: from the last bucket's
    launch (backward's compute done) until every bucket completed: communication that did not
    overlap backward. ``syncs_per_step``: gradient all-reduce rounds per optimizer step;
    ``forwards_per_step``: training forward passes through the model per step (more forwards
    than steps: gradient accumulation)."""

    site: str | None  # the DDP(...) call in the script
    buckets: int
    bucket_bytes: list[int]
    bucket_time_s: list[float | None]
    grad_bytes: int  # gradient bytes of one all-reduce round
    bucket_cap_bytes: int | None = None
    gradient_as_bucket_view: bool | None = None
    static_graph: bool | None = None
    find_unused_parameters: bool | None = None
    comm_hook: str | None = None  # the script's own comm hook, if it registered one
    syncs_per_step: float | None = None
    forwards_per_step: float | None = None
    exposed_s_per_step: float | None = None
    overlapped_share: float | None = None  # of the buckets' all-reduce time, during backward


class RingAllReduce(Record):
    """An ESTIMATE from the Ring-AllReduce model: each rank sends and receives
    ``2(N-1)/N`` of the all-reduced bytes, so the achieved bus bandwidth is
    ``2(N-1)/N * bytes / time``. ``time_s`` is one gradient all-reduce round's communicating
    time: per bucket, the launch-to-completion time on the rank that arrived last (the other
    ranks' longer times are waiting), summed over the buckets. ``latency_s`` and
    ``bandwidth_gbps`` fit ``time = latency + bytes / bandwidth`` over the buckets (with two or
    more bucket sizes). ``nominal_gbps``: the link's nominal bandwidth where gpuopt knows it
    (``nominal_source`` says from what), else None."""

    model: str
    world_size: int
    bytes: int
    time_s: float
    algo_gbps: float
    bus_gbps: float
    buckets: int
    nominal_gbps: float | None = None
    nominal_source: str | None = None
    efficiency: float | None = None  # bus_gbps / nominal_gbps
    latency_s: float | None = None
    bandwidth_gbps: float | None = None


class DistributedRun(Record):
    """``distributed``: this rank's place in the job and what it spent in collectives (a rank's
    document), or the job's (a merged document: rank 0's, with ``ring`` and ``world``)."""

    backend: str | None
    world_size: int
    rank: int
    local_rank: int | None = None
    local_world_size: int | None = None
    node_rank: int | None = None  # torchrun's GROUP_RANK
    hostname: str | None = None
    job_id: str | None = None  # torchrun's TORCHELASTIC_RUN_ID (--rdzv-id)
    restart: int | None = None  # TORCHELASTIC_RESTART_COUNT
    collectives: list[CollectiveOp] = field(default_factory=list)
    ddp: list[DdpModel] = field(default_factory=list)
    ring: RingAllReduce | UnsetType = UNSET
    note: str | UnsetType = UNSET


class StragglerEvidence(Record):
    """The evidence of a ``straggler-rank`` finding (run documents and traces alike: a trace
    analysis fills what a trace can give and leaves the rest None). Seconds per step; dicts are
    keyed by the rank as a string (JSON keys). ``extra_by_part``: how much more of each part of
    the step (data_wait, h2d, sync, compute, other) the straggler spends than the other ranks'
    median, seconds per step; ``top_part`` the largest of them."""

    summary: str
    rank: int
    extra_s_per_step: float  # its own work minus the other ranks' median own work
    others_wait_s_per_step: float  # what each other rank loses waiting for it (mean)
    others_wait_s_total_per_step: float  # summed over the other ranks
    own_work_s_per_step: dict[str, float]
    wait_s_per_step: dict[str, float]
    extra_by_part: dict[str, float]
    top_part: str | None
    step_time_s: float | None  # the job's step time (mean over ranks)
    steps_compared: int
    source: str = "run"  # "run" (gpuopt profile) or "trace"


# -- memory (docs/memory.md) ---------------------------------------------------------------------

# the categories a step's memory is split into, in the contract's order
MEMORY_CATEGORIES: tuple[str, ...] = (
    "parameters",
    "gradients",
    "optimizer_state",
    "activations",
    "temporaries",
    "other",
)


class MemoryByCategory(Record):
    """Bytes by what holds them, at the step's peak: ``parameters`` (and buffers), ``gradients``,
    ``optimizer_state``, ``activations`` (made by the forward and kept for the backward),
    ``temporaries`` (made during the backward: gradients of activations, workspaces), ``other``
    (the batch itself and anything else: on a measured GPU step, what the allocator held beyond
    the tensors gpuopt saw)."""

    parameters: int = 0
    gradients: int = 0
    optimizer_state: int = 0
    activations: int = 0
    temporaries: int = 0
    other: int = 0

    def items(self) -> list[tuple[str, int]]:
        return [(k, int(getattr(self, k))) for k in MEMORY_CATEGORIES]

    def total(self) -> int:
        return sum(v for _, v in self.items())


class MemoryHolder(Record):
    """Memory made at one place: the user's line (``site``) and the module whose forward was
    running (``module``: its name in the model, ``""`` for the model itself)."""

    site: str | None
    module: str | None
    bytes: int
    category: str | UnsetType = UNSET  # one of MEMORY_CATEGORIES
    count: int | UnsetType = UNSET  # tensors made there


class MemoryMeasured(Record):
    """Measured on the GPU the run used (torch.cuda's caching allocator)."""

    peak_allocated_bytes: int
    peak_reserved_bytes: int
    by_category: MemoryByCategory | None = None
    largest: list[MemoryHolder] = field(default_factory=list)
    # reserved - allocated at the end of the run's peak: memory the allocator holds in free blocks
    fragmentation_bytes: int | UnsetType = UNSET
    # the step whose tensors were split by category (one step, under gpuopt's tracker)
    tracked_step: int | UnsetType = UNSET
    batch_size: int | None | UnsetType = UNSET  # the first step's batch size
    # per step: the peak allocated in that step (the first steps of the run)
    step_peaks_bytes: list[int] | UnsetType = UNSET
    num_alloc_retries: int | UnsetType = UNSET  # cudaMalloc retries after freeing the cache
    note: str | UnsetType = UNSET


class MemoryPoint(Record):
    """One replay of the step under fake tensors: its batch size and peak."""

    batch_size: int
    peak_bytes: int


class MemoryPredicted(Record):
    """An ESTIMATE: the step replayed under fake tensors (no memory allocated), at the script's
    batch size and more, peak bytes fitted against the batch size: ``peak = fixed_bytes +
    bytes_per_sample * batch``. ``max_batch_size`` is the largest batch whose predicted peak
    fits ``capacity * (1 - margin)``; ``limit`` says what limits it. See docs/memory.md."""

    source: str  # "fake-tensors"
    batch_size: int | None  # the script's batch size (None: not found)
    peak_bytes: int | None
    by_category: MemoryByCategory | None
    bytes_per_sample: int | None
    max_batch_size: int | None
    margin: float
    limit: str
    fixed_bytes: int | None | UnsetType = UNSET
    points: list[MemoryPoint] | UnsetType = UNSET
    largest: list[MemoryHolder] | UnsetType = UNSET
    replayed: str | UnsetType = UNSET  # what was replayed, in words
    device_model: str | UnsetType = UNSET  # how the target device was modelled
    cost_s: float | UnsetType = UNSET  # wall time the prediction took
    notes: list[str] | UnsetType = UNSET
    # the replayed step's FLOPs at the script's batch (matmuls, convolutions, attention: what
    # torch.utils.flop_counter's formulas count), for the time its math takes on the device
    step_flops: int | UnsetType = UNSET


class MemoryOom(Record):
    """The run died of torch.OutOfMemoryError: where, what it asked for, what held the memory
    (measured on the GPU from the allocator's snapshot, or ESTIMATED by the fake replay at that
    batch: ``held_source`` says which), and the batch size that would have fit."""

    site: str | None
    requested_bytes: int | None
    held: list[MemoryHolder] = field(default_factory=list)
    fits_batch_size: int | None = None
    held_source: str | UnsetType = UNSET  # "snapshot" (GPU) or "fake-tensors" (estimate)
    batch_size: int | None | UnsetType = UNSET  # the batch size of the failing step
    capacity_bytes: int | None | UnsetType = UNSET  # the device's, from the error message
    reserved_unallocated_bytes: int | None | UnsetType = UNSET  # from the error message
    message: str | UnsetType = UNSET


class MemoryReport(Record):
    """``memory``: where a step's memory goes on a GPU (measured there), how much batch fits
    (predicted with fake tensors, on any machine) and, for a run that died of OOM, why."""

    device: str | None
    capacity_bytes: int | None
    measured: MemoryMeasured | None = None
    predicted: MemoryPredicted | None = None
    oom: MemoryOom | None = None
    capacity_source: str | UnsetType = UNSET  # "table", "size", "device" (measured), "message"
    note: str | UnsetType = UNSET


# -- torch.compile (docs/compile.md) -------------------------------------------------------------


class GraphBreak(Record):
    """Where Dynamo split a compiled function: the user's line (``site``, the innermost frame in
    the user's own code of the break's stack) and why (``reason``: Dynamo's graph-break type).
    ``count``: how many times Dynamo met this break while compiling (once per compile of the
    frame that holds it: a recompile meets it again)."""

    site: str | None
    reason: str
    count: int
    kind: str | UnsetType = UNSET  # print, item, data-dependent-branch, logging, builtin, ...
    detail: str | UnsetType = UNSET  # Dynamo's explanation, first line
    hints: list[str] | UnsetType = UNSET  # Dynamo's own hints
    function: str | UnsetType = UNSET  # the compiled function it splits
    stack: list[str] | UnsetType = UNSET  # the user's frames, outermost first ("file:line")
    code: str | UnsetType = UNSET  # the source line at site
    steps: list[int] | UnsetType = UNSET  # the steps in which Dynamo met it


class Recompile(Record):
    """A frame compiled again because a guard of its earlier compile failed. ``site``: the
    recompiled function's ``def`` line; ``guard``: the guard that failed (which variable, which
    check), ``reason`` Dynamo's words with the values (``expected 4, actual 5``); ``count``
    recompiles for this guard, ``per_step`` over the run's steps."""

    site: str | None
    guard: str
    reason: str
    count: int
    per_step: float
    function: str | UnsetType = UNSET
    steps: list[int] | UnsetType = UNSET  # the steps in which they happened
    compile_s: float | UnsetType = UNSET  # the recompiles' own compile time
    guard_site: str | UnsetType = UNSET  # the user's line the guard comes from, where Dynamo says


class FrameworkPhase(Record):
    """One phase of a framework's loop: ``name`` ``train``, ``validation``, ``sanity-check`` or
    ``eval``; ``steps`` the steps (or batches) it ran."""

    name: str
    steps: int


class Framework(Record):
    """``framework``: the training framework the script ran through (docs/frameworks.md).
    ``name`` the package (``transformers``, ``lightning``, ``accelerate``, ``timm`` ...),
    ``version`` its version; ``entry`` the user's line that called into it (``trainer.train()``,
    ``trainer.fit(...)``), None where no user line led there; ``phases`` the loop's phases with
    their steps; ``python_share`` the measured steps' time in the framework's own Python (0-1),
    None where it was not measured; ``knobs_site`` the ``Trainer(...)`` call (the object the
    framework's knobs are set on) in the entry's file."""

    name: str
    version: str | None = None
    entry: str | None = None
    phases: list[FrameworkPhase] = field(default_factory=list)
    python_share: float | None = None
    # where the user's code sets the framework's settings, by call: {"TrainingArguments":
    # "train.py:44"} (the knobs findings name are changed there)
    settings_at: dict[str, str] = field(default_factory=dict)
    # the user's line of the call the framework-bound finding's knobs are set in (Lightning's
    # ``Trainer(...)``: the last one before the entry), where found; also in settings_at
    knobs_site: str | None | UnsetType = UNSET


class Overhead(Record):
    """``overhead``: what gpuopt itself cost this run, measured (seconds). ``start_s`` gpuopt's
    code before the script's first line (torch's import left out: the script pays it without
    gpuopt too); ``steps_s`` gpuopt's code on the training thread at the steps outside its
    windows (the DataLoader wrapper, the batch shapes, the step clock and its listeners), over
    ``steps`` steps, ``per_step_s`` a step on average; ``threads_s`` the CPU time of gpuopt's
    sampling threads (time the script's threads can lose where cores or the GIL are short);
    ``windows_s`` the time the recording windows' ``window_steps`` steps took beyond the
    median measured step; ``end_s`` from the script's end to this document built (the probes
    stopped, the memory replay, the assembly, the findings; writing and showing it come
    after); ``total_s`` their sum; ``share`` that sum over the run's wall time with gpuopt's
    start and end."""

    start_s: float
    steps_s: float
    steps: int
    per_step_s: float
    threads_s: float
    windows_s: float
    window_steps: int
    end_s: float
    total_s: float
    share: float


class CompiledFunction(Record):
    """One function handed to torch.compile as it ran: its frames (the function and the resume
    functions Dynamo made at its graph breaks), graphs, breaks and recompiles."""

    name: str
    site: str | None  # its def line (user code), else where torch.compile was called
    frames: int
    graphs: int
    graph_breaks: int
    recompiles: int
    compile_s: float
    compiled_at: str | None | UnsetType = UNSET  # the torch.compile / .compile() call
    backend: str | UnsetType = UNSET
    mode: str | UnsetType = UNSET
    called_from: str | UnsetType = UNSET  # the user's line that first called it
    recompile_limit_hit: bool | UnsetType = UNSET  # Dynamo gave up: it runs eagerly from then


class CompileCall(Record):
    """A ``torch.compile(...)`` / ``Module.compile(...)`` call the script made, as written."""

    site: str | None
    target: str
    backend: str
    mode: str
    dynamic: bool | None = None
    fullgraph: bool = False


class Compile(Record):
    """``compile``: what torch.compile did in the run, from Dynamo's own records
    (docs/compile.md). ``compile_s``: time in Dynamo and the backend compiling (first compiles
    and recompiles, forward and lazily compiled backward); ``frames``: code objects compiled
    (resume functions included); ``graphs``: graphs compiled; ``eager_ops_per_step``: top-level
    ops that ran inside compiled functions but outside their graphs in one measured step (the
    ops left eager between graphs), None where it could not be measured (``note`` says why)."""

    backend: str | None
    mode: str | None
    compile_s: float | None
    frames: int | None
    graphs: int | None
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    recompiles: list[Recompile] = field(default_factory=list)
    eager_ops_per_step: float | None = None
    # gpuopt's additions
    first_compile_s: float | UnsetType = UNSET  # the frames' first compiles
    recompile_s: float | UnsetType = UNSET  # their recompiles
    import_s: float | None | UnsetType = UNSET  # importing torch._dynamo (its first use)
    compile_share: float | None | UnsetType = UNSET  # (compile_s + import_s) / the run's wall time
    compile_s_in_measured_steps: float | UnsetType = UNSET  # compiling inside measured steps
    compile_steps: list[int] | UnsetType = UNSET  # the steps in which something compiled
    functions: list[CompiledFunction] | UnsetType = UNSET
    calls: list[CompileCall] | UnsetType = UNSET
    graph_calls_per_step: float | None | UnsetType = UNSET  # compiled graphs run, one step
    regions_per_step: float | None | UnsetType = UNSET  # compiled frames entered, one step
    outside_ops_per_step: float | None | UnsetType = UNSET  # top-level ops outside compiled code
    window_step: int | None | UnsetType = UNSET  # the step those counts come from
    failed: list[str] | UnsetType = UNSET  # compiles that failed (Dynamo fell back to eager)
    source: str = "dynamo"  # "dynamo" (a run) or "trace" (compiled regions seen in a trace)
    note: str | UnsetType = UNSET
