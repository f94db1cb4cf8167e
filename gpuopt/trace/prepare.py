"""From raw columns to the analysed view of one rank, with HTA 0.5's conventions.

The conventions matter because users compare numbers with Holistic Trace Analysis (HTA), and a
tool whose "idle %" differs for no stated reason is not trusted. What HTA does on load, and so do
we (docs/trace-metrics.md says where and why we differ):

* ns-resolution traces (fractional ``ts``): start rounded up and end rounded down to whole µs
  (pytorch/pytorch#122425: events that overlap by a fraction of a µs). An event that holds no
  whole µs ends at its rounded start (zero length), where HTA gives it a negative length.
* "GPU events" are the events with a ``stream`` (kernels, memcpy, memset, CUDA syncs); GPU
  *kernels* additionally have a correlation id (or are ``Event Sync``/``Context Sync``). Where we
  depart from HTA: an event of a host category (:data:`HOST_CATS`: ops, annotations, Python
  frames, runtime and driver calls) is never a GPU event, whatever its args say (Inductor's
  host-side ``cpu_op`` record of a Triton launch carries an integer ``stream``).
* With two or more ``ProfilerStep#N`` annotations, the last step is dropped (it is usually cut
  off by the profiler): CPU events starting at or after its start, and GPU events launched by them.
* Steps are the host's ``ProfilerStep#N`` annotations only. A GPU-side annotation of the same name
  (category ``gpu_user_annotation``: the span of the GPU work the step's annotation enclosed,
  often much longer than the step, as the GPU runs behind) is a GPU interval, never a step.
* Kernel type from the name: ``nccl*Kernel`` → communication; ``Memcpy*``/``Memset*``/``dma*`` →
  memory; names containing ``Memcpy``, ``Sync`` or starting with ``Memset`` otherwise → other;
  the rest → computation.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
import numpy as np

from gpuopt.trace.anomalies import stream_overlaps
from gpuopt.trace.array_stats import member, unique
from gpuopt.trace.columns import QUEUED_CATS, BoolArray, EventColumns, FloatArray, IntArray

COMPUTATION, COMMUNICATION, MEMORY, OTHER = 0, 1, 2, 3
KERNEL_TYPES = ("COMPUTATION", "COMMUNICATION", "MEMORY", "OTHER")

_COMM_RE = re.compile(r"^nccl.*Kernel")
_MEM_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE_RE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
_STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")
SYNC_EVENT_NAMES = ("Event Sync", "Context Sync")


def kernel_type_of(name: str) -> int:
    if _COMM_RE.match(name):
        return COMMUNICATION
    if _MEM_RE.match(name):
        return MEMORY
    if not _NOT_COMPUTE_RE.match(name):
        return COMPUTATION
    return OTHER


def step_number(name: str) -> int | None:
    m = _STEP_RE.match(name)
    return int(m.group(1)) if m else None


class Step(msgspec.Struct):
    number: int
    start: float
    end: float
    thread: int


class RankView(msgspec.Struct):
    """One rank, analysed view. Arrays are aligned with ``ev`` (the kept events)."""

    rank: int
    ev: EventColumns
    ts: FloatArray
    end: FloatArray
    dur: FloatArray
    on_stream: BoolArray  # a GPU event: on a stream, not of a host category (HOST_CATS)
    gpu_kernel: BoolArray  # HTA's GPUKernelFilter
    ktype: IntArray  # kernel type per event (meaningful where on_stream)
    runtime_index: IntArray  # for GPU events: index of the launching CPU event, else -1
    steps: list[Step] = msgspec.field(default_factory=list)  # profiler steps kept
    # starts of the GPU events whose launch is not in the trace (queued before it began), sorted;
    # taken before the last-step rule, which drops them
    unlaunched_ts: FloatArray = msgspec.field(default_factory=lambda: np.zeros(0))
    dropped_last_step: Step | None = None
    events_total: int = 0
    source: str = ""
    # Repairs of this rank's events, one line each (the rank is not named: the caller adds it).
    notes: list[str] = msgspec.field(default_factory=list)
    # Derived structures several analyses need (e.g. a thread's sorted CPU ops, see cpu_ops),
    # built once on first use instead of once per analysis.
    memo: dict[Any, Any] = msgspec.field(default_factory=dict)

    def name(self, i: int) -> str:
        return self.ev.names[int(self.ev.name[i])]


# Host-side categories: never GPU work, whatever their args say.
HOST_CATS = (
    "cpu_op",
    "Operator",
    "user_annotation",
    "python_function",
    "cuda_runtime",
    "cuda_driver",
    "Runtime",
    "mtia_runtime",
    "overhead",
    "cpu_instant_event",
)


def gpu_events(cols: EventColumns) -> tuple[BoolArray, BoolArray]:
    """Per event: is it a GPU event (on a stream, not of a :data:`HOST_CATS` category), and a
    GPU kernel (a GPU event with a correlation id, or a sync event on the device)."""
    host = cols.has_cat(HOST_CATS)
    on_stream = (cols.stream != -1) & ~host
    is_sync = cols.has_name(lambda n: n in SYNC_EVENT_NAMES)
    gpu_kernel = (((cols.stream >= 0) & (cols.correlation >= 0)) | is_sync) & ~host
    return on_stream, gpu_kernel


def count_step_names(cols: EventColumns) -> set[str]:
    """The names of the host's ``ProfilerStep`` annotations (HTA's last-step rule counts them;
    a GPU-side annotation of another step number is not a step)."""
    if not any("ProfilerStep" in n for n in cols.names):
        return set()
    on_stream, gpu_kernel = gpu_events(cols)
    codes = unique(cols.name[step_annotations(cols, gpu_kernel, on_stream)])
    return {cols.names[int(c)] for c in codes}


GPU_ANNOTATION_CATS = ("gpu_user_annotation",)


def step_annotations(cols: EventColumns, gpu_kernel: BoolArray, on_stream: BoolArray) -> BoolArray:
    """Mask of the host's ``ProfilerStep`` annotations: not a GPU event, not a GPU-side
    annotation (``gpu_user_annotation``)."""
    if not len(cols):
        return np.zeros(0, dtype=bool)
    names_step = np.array([("ProfilerStep" in n) for n in cols.names] or [False], dtype=bool)
    on_gpu = np.array([c in GPU_ANNOTATION_CATS for c in cols.cats] or [False], dtype=bool)
    return np.asarray(
        names_step[cols.name] & ~on_gpu[cols.cat] & ~gpu_kernel & ~on_stream, dtype=bool
    )


def build_view(rank: int, cols: EventColumns, filter_last_step: bool, source: str = "") -> RankView:
    """Round, classify, link GPU events to their launches, and drop the last profiler step."""
    ts = cols.ts.copy()
    end = cols.ts + cols.dur
    if cols.fractional_ts:
        ts = np.ceil(ts)
        end = np.maximum(np.floor(end), ts)  # less than a whole µs: zero length, not negative
    on_stream, gpu_kernel = gpu_events(cols)
    is_step_evt = step_annotations(cols, gpu_kernel, on_stream)
    launchers = cols.correlation[~gpu_kernel & (cols.correlation != -1)]
    unlaunched_ts = np.sort(ts[on_stream & ~member(cols.correlation, launchers)])
    keep = np.ones(len(cols), dtype=bool)
    dropped: Step | None = None
    if filter_last_step and is_step_evt.any():
        last_start = ts[is_step_evt].max()
        cpu_keep = ~gpu_kernel & (ts < last_start)
        gpu_keep = gpu_kernel & member(cols.correlation, cols.correlation[cpu_keep])
        keep = cpu_keep | gpu_keep
        li = np.flatnonzero(is_step_evt & (ts == last_start))[0]
        num = step_number(cols.names[int(cols.name[li])])
        dropped = Step(
            num if num is not None else -1, float(ts[li]), float(end[li]), int(cols.thread[li])
        )
    if not keep.all():
        cols = cols.take(keep)
        ts, end, on_stream, gpu_kernel, is_step_evt = (
            ts[keep],
            end[keep],
            on_stream[keep],
            gpu_kernel[keep],
            is_step_evt[keep],
        )
    dur = end - ts

    ktable = np.array([kernel_type_of(n) for n in cols.names] or [OTHER], dtype=np.int64)
    ktype = ktable[cols.name] if len(cols) else np.zeros(0, dtype=np.int64)

    runtime_index = _link_launches(cols, gpu_kernel)

    steps: list[Step] = []
    for i in np.flatnonzero(is_step_evt):
        num = step_number(cols.names[int(cols.name[i])])
        if num is not None:
            steps.append(Step(num, float(ts[i]), float(end[i]), int(cols.thread[i])))
    # One record per step number (a file may repeat one: the longest is the step).
    uniq: dict[int, Step] = {}
    for st in sorted(steps, key=lambda s: (s.number, -(s.end - s.start))):
        uniq.setdefault(st.number, st)
    view = RankView(
        rank=rank,
        ev=cols,
        ts=ts,
        end=end,
        dur=dur,
        on_stream=on_stream,
        gpu_kernel=gpu_kernel,
        ktype=ktype,
        runtime_index=runtime_index,
        steps=sorted(uniq.values(), key=lambda s: s.start),
        unlaunched_ts=unlaunched_ts,
        dropped_last_step=dropped,
        events_total=cols.total_events,
        source=source,
        notes=list(cols.repairs),
    )
    overlaps = stream_overlaps([(ts[i], end[i]) for _, i in queued_by_stream(view)])
    if overlaps:
        view.notes.append(
            f"{overlaps} GPU event{'s' if overlaps > 1 else ''} start before the work queued "
            "before them on their stream has ended (a stream runs its work in order): "
            "idle time per stream counts an overlap as no gap"
        )
    return view


def queued_by_stream(v: RankView) -> list[tuple[int, IntArray]]:
    """Per stream, its queued events (kernels, copies, sets: :data:`QUEUED_CATS`) sorted by start
    (stable: file order on ties); kept on the view, as HTA's idle analysis sequences the same."""
    if "queued_by_stream" not in v.memo:
        q = np.flatnonzero(v.on_stream & v.ev.has_cat(QUEUED_CATS))
        streams = v.ev.stream[q]
        out: list[tuple[int, IntArray]] = []
        for s in unique(streams).tolist():
            idx = q[streams == s]
            out.append((int(s), idx[np.argsort(v.ts[idx], kind="stable")]))
        v.memo["queued_by_stream"] = out
    return v.memo["queued_by_stream"]  # type: ignore[no-any-return]


def _link_launches(cols: EventColumns, gpu_kernel: BoolArray) -> IntArray:
    """GPU event → the CPU event with the same correlation id (the last one, as HTA keeps)."""
    out = np.full(len(cols), -1, dtype=np.int64)
    has = cols.correlation != -1
    cpu = np.flatnonzero(has & ~gpu_kernel)
    gpu = np.flatnonzero(has & gpu_kernel)
    if cpu.size == 0 or gpu.size == 0:
        return out
    ccorr = cols.correlation[cpu]
    # last CPU event per correlation id: sort by (corr, order) and take the last of each run
    o = np.lexsort((cols.order[cpu], ccorr))
    sc = ccorr[o]
    last = np.append(sc[1:] != sc[:-1], True)
    uc = sc[last]
    ui = cpu[o][last]
    gcorr = cols.correlation[gpu]
    pos = np.searchsorted(uc, gcorr)
    pos_c = np.minimum(pos, uc.size - 1)
    found = uc[pos_c] == gcorr
    out[gpu[found]] = ui[pos_c[found]]
    return out
