"""Per-step time breakdown, as the PyTorch profiler's overview page did it.

Each step's time is split into Kernel > Memcpy > Memset > Communication > Runtime > DataLoader >
CPU op > Other: every category counts only time not covered by a category before it, so the eight
add up to the step time. (We also split Runtime into its sync calls and the rest, which the
contract's ``breakdown.sync`` needs.)

Step windows: a ``ProfilerStep#N`` annotation starts a step on the CPU; the step ends when both
its CPU annotation and the GPU work it launched have ended (the GPU runs behind the host), and the
next step starts no earlier than that, so windows never overlap and add up to wall time. Where the
GPU runs a step or more behind (each step's GPU work starts after its host step has ended), the
windows are the steps' GPU work instead (:mod:`gpuopt.trace.gpu_lag`).
Host activity counts only on the training threads: the thread of the step annotations and the
threads that launched GPU work (not, e.g., a pin-memory thread that is always busy).
"""

from __future__ import annotations

import re

import numpy as np

from gpuopt.model.trace import StepOverview
from gpuopt.trace import intervals as iv
from gpuopt.trace.array_stats import code_mask, unique
from gpuopt.trace.columns import FloatArray
from gpuopt.trace.gpu_lag import gpu_windows, launched_spans
from gpuopt.trace.memory import SYNC_APIS
from gpuopt.trace.prepare import COMMUNICATION, MEMORY, RankView

CATEGORIES = (
    "kernel",
    "memcpy",
    "memset",
    "communication",
    "runtime",
    "dataloader",
    "cpu_op",
    "other",
)
RUNTIME_CATS = ("Runtime", "cuda_runtime", "cuda_driver", "mtia_runtime")
OP_CATS = ("cpu_op", "Operator", "user_annotation", "python_function")
_COMM_OP_RE = re.compile(
    r"^(nccl:|c10d::|gloo:|record_param_comms|ProcessGroup|torch\.distributed)|all_?reduce|all_?gather|reduce_?scatter|broadcast|all_to_all",
    re.I,
)
# Every match of _COMM_OP_RE contains one of these words or starts with one of these prefixes.
_COMM_OP_WORDS = ("all", "reduce", "broadcast")
_COMM_OP_PREFIXES = (
    "nccl:",
    "c10d::",
    "gloo:",
    "record_param_comms",
    "processgroup",
    "torch.distributed",
)


def is_comm_op(name: str) -> bool:
    """A collective-communication CPU op (``_COMM_OP_RE``). The case-insensitive regex search
    costs ~10 µs a name; a plain substring test rules out almost every name first (ASCII names
    only: for others, case-insensitive matching is subtler than ``str.lower``)."""
    if name.isascii():
        low = name.lower()
        if not (any(w in low for w in _COMM_OP_WORDS) or low.startswith(_COMM_OP_PREFIXES)):
            return False
    return bool(_COMM_OP_RE.search(name))


def is_dataloader(name: str) -> bool:
    return "DataLoader" in name or "dataloader" in name


def collective_us(v: RankView) -> float:
    """Time in collectives: a communication kernel running (NCCL, on the GPU) or a training
    thread inside a collective op (``c10d::``, ``nccl:``, ``gloo:``, ``record_param_comms``...:
    :func:`is_comm_op`; all a CPU-only gloo trace has), their union over the whole trace."""
    comm = collective_ops(v) | (v.on_stream & (v.ktype == COMMUNICATION))
    return iv.length(iv.merge(v.ts[comm], v.end[comm]))


def collective_ops(v: RankView) -> np.ndarray:
    """Mask of the collective ops (:func:`is_comm_op`) on the rank's training threads; computed
    once per view (three analyses ask), not to be written to."""
    if "collective_ops" not in v.memo:
        ev = v.ev
        host = ~v.on_stream & code_mask(ev.thread, training_threads(v), len(ev.threads))
        v.memo["collective_ops"] = host & ev.has_cat(OP_CATS) & _comm_names(v)
    return v.memo["collective_ops"]  # type: ignore[no-any-return]


def _comm_names(v: RankView) -> np.ndarray:
    """Per event: its name is a collective op's (:func:`is_comm_op`, once per view)."""
    if "comm_names" not in v.memo:
        v.memo["comm_names"] = v.ev.has_name(is_comm_op)
    return v.memo["comm_names"]  # type: ignore[no-any-return]


def training_threads(v: RankView) -> np.ndarray:
    launched = v.runtime_index[v.runtime_index >= 0]
    threads = set(unique(v.ev.thread[launched]).tolist()) if launched.size else set()
    threads |= {s.thread for s in v.steps}
    return np.array(sorted(threads), dtype=np.int64)


def step_windows(v: RankView) -> tuple[np.ndarray, np.ndarray]:
    """The profiler steps' windows (see the module); where the GPU runs behind the host, the
    steps' windows on the GPU (:func:`gpuopt.trace.gpu_lag.gpu_windows`)."""
    if not v.steps:
        return np.zeros(0), np.zeros(0)
    behind = gpu_windows(v)
    if behind is not None:
        return behind
    starts = np.array([s.start for s in v.steps])
    ends = np.array([s.end for s in v.steps])
    _, gpu_end = launched_spans(v)
    out_s, out_e = starts.copy(), np.maximum(ends, gpu_end)
    for i in range(1, starts.size):
        out_s[i] = max(out_s[i], out_e[i - 1])
        out_e[i] = max(out_e[i], out_s[i])
    return out_s, out_e


def category_intervals(v: RankView) -> list[tuple[str, iv.Intervals]]:
    """Union of intervals per category, in priority order (runtime split into sync / rest)."""
    ev = v.ev
    gpu = v.on_stream
    is_memcpy = ev.has_name(lambda n: n.startswith("Memcpy"))
    is_memset = ev.has_name(lambda n: n.startswith("Memset"))
    host = ~gpu & code_mask(ev.thread, training_threads(v), len(ev.threads))
    runtime = host & ev.has_cat(RUNTIME_CATS)
    sync_rt = runtime & ev.has_name(lambda n: n in SYNC_APIS)
    ops = host & ev.has_cat(OP_CATS) & ~ev.has_name(lambda n: n.startswith("ProfilerStep"))
    comm = ops & _comm_names(v)
    dl = ops & ev.has_name(is_dataloader)

    def u(m: np.ndarray) -> iv.Intervals:
        return iv.merge(v.ts[m], v.end[m])

    return [
        ("kernel", u(gpu & (v.ktype != MEMORY) & ~ev.has_cat(("cuda_sync",)))),
        ("memcpy", u(gpu & is_memcpy)),
        ("memset", u(gpu & is_memset)),
        ("communication", u(comm)),
        ("runtime_sync", u(sync_rt)),
        ("runtime", u(runtime & ~sync_rt)),
        ("dataloader", u(dl)),
        ("cpu_op", u(ops & ~dl & ~comm)),
    ]


def overview_windows(v: RankView) -> tuple[FloatArray, FloatArray, list[int | None]]:
    """The rows of :func:`step_overview`: one window per profiler step; without ``ProfilerStep``
    annotations one (``step`` None) for the whole trace (first to last event)."""
    ws, we = step_windows(v)
    numbers: list[int | None] = [s.number for s in v.steps]
    if ws.size == 0 and len(v.ts):
        ws, we = np.array([float(v.ts.min())]), np.array([float(v.end.max())])
        numbers = [None]
    return ws, we, numbers


def exposed_collective_us(v: RankView) -> list[float]:
    """Per row of :func:`step_overview`: the time in collectives (:func:`collective_us`'s union)
    while no other GPU work runs (kernels, copies, sets), which the rank spends communicating or
    waiting for the others. It lies inside the rows' kernel (a communication kernel) and
    communication (a collective op on the host, nothing on the GPU) times, so the contract's
    breakdown takes it out of ``compute``."""
    ws, we, _ = overview_windows(v)
    if ws.size == 0:
        return []
    comm = collective_ops(v) | (v.on_stream & (v.ktype == COMMUNICATION))
    other_gpu = v.on_stream & (v.ktype != COMMUNICATION)
    exposed = iv.subtract(
        iv.merge(v.ts[comm], v.end[comm]), iv.merge(v.ts[other_gpu], v.end[other_gpu])
    )
    return [float(x) for x in iv.covered_in_windows(exposed, ws, we)]


def step_overview(v: RankView) -> list[StepOverview]:
    """One row per profiler step; without ``ProfilerStep`` annotations, one row (``step`` None)
    for the whole trace (first to last event), so a breakdown is still given."""
    ws, we, numbers = overview_windows(v)
    if ws.size == 0:
        return []
    covered = iv.empty()
    per: dict[str, FloatArray] = {}
    for name, u in category_intervals(v):
        excl = iv.subtract(u, covered)
        per[name] = iv.covered_in_windows(excl, ws, we)
        covered = iv.merge(np.concatenate([covered[0], u[0]]), np.concatenate([covered[1], u[1]]))
    return [
        _step_row(number, float(ws[i]), float(we[i] - ws[i]), per, i)
        for i, number in enumerate(numbers)
    ]


def _step_row(
    number: int | None, start: float, dur: float, per: dict[str, FloatArray], i: int
) -> StepOverview:
    """Step ``i``'s row from the per-category exclusive times; ``other`` is what none covers."""
    us = {c: float(per[c][i]) for c in ("kernel", "memcpy", "memset", "communication")}
    us["runtime"] = float(per["runtime_sync"][i] + per["runtime"][i])
    us["dataloader"] = float(per["dataloader"][i])
    us["cpu_op"] = float(per["cpu_op"][i])
    used = sum(us[c] for c in CATEGORIES[:-1])
    return StepOverview(
        step=number,
        start_us=start,
        dur_us=dur,
        kernel_us=us["kernel"],
        memcpy_us=us["memcpy"],
        memset_us=us["memset"],
        communication_us=us["communication"],
        runtime_us=us["runtime"],
        sync_us=float(per["runtime_sync"][i]),
        dataloader_us=us["dataloader"],
        cpu_op_us=us["cpu_op"],
        other_us=max(dur - used, 0.0),
    )
