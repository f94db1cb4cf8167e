"""Host-side structure: which CPU op encloses a given moment on a thread.

Used to name the op behind a sync call (``aten::item`` → ``aten::_local_scalar_dense`` →
``cudaStreamSynchronize``) and the host activity during a GPU idle gap. Ops on one thread nest
properly (the profiler records a call stack), so the outermost op around a time is found by a
binary search over the thread's top-level ops, and the chains of enclosing ops of many events at
once by a vectorised walk down a range-maximum table (:func:`enclosing_chains`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from gpuopt.trace.prepare import RankView

_USER_FRAME_RE = re.compile(r"^(?P<file>[^<(]+\.py)\((?P<line>\d+)\)")
_LIB_RE = re.compile(
    r"(site-packages|dist-packages|/torch/|^torch/|/lib/python\d|<frozen|/gpuopt/)"
)
CPU_OP_CATS = (
    "cpu_op",
    "Operator",
    "user_annotation",
    "python_function",
    "Runtime",
    "cuda_runtime",
    "cuda_driver",
)


@dataclass
class ThreadOps:
    """The CPU events of one thread, sorted by start (longer first on ties: parents before
    children)."""

    index: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    top: np.ndarray  # positions (into index) of top-level events
    top_ts: np.ndarray
    top_end: np.ndarray
    # range-maximum table of ``end`` (level j: max over 2**j consecutive ops), built on first use
    end_max: list[np.ndarray] = field(default_factory=list, repr=False)


def thread_ops(v: RankView, thread: int, mask: np.ndarray | None = None) -> ThreadOps:
    """The CPU ops of ``thread`` (restricted to ``mask`` if given); without a mask the result is
    kept on the view, since the sync, transfer and idle analyses all ask for the same threads."""
    if mask is None:
        key = ("thread_ops", int(thread))
        if key not in v.memo:
            v.memo[key] = _thread_ops(v, _cpu_op_mask(v) & (v.ev.thread == thread))
        return v.memo[key]  # type: ignore[no-any-return]
    return _thread_ops(v, _cpu_op_mask(v) & (v.ev.thread == thread) & mask)


def _cpu_op_mask(v: RankView) -> np.ndarray:
    if "cpu_op_mask" not in v.memo:
        v.memo["cpu_op_mask"] = ~v.on_stream & v.ev.has_cat(CPU_OP_CATS)
    return v.memo["cpu_op_mask"]  # type: ignore[no-any-return]


def _thread_ops(v: RankView, m: np.ndarray) -> ThreadOps:
    idx = np.flatnonzero(m)
    idx = idx[_start_order(v.ts[idx], v.dur[idx])]
    ts, end = v.ts[idx], v.end[idx]
    if idx.size:
        prev_max = np.maximum.accumulate(end)
        top_mask = np.empty(idx.size, dtype=bool)
        top_mask[0] = True
        top_mask[1:] = ts[1:] >= prev_max[:-1]
        top = np.flatnonzero(top_mask)
    else:
        top = np.zeros(0, dtype=np.int64)
    return ThreadOps(idx, ts, end, top, ts[top], end[top])


def _start_order(ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """``np.lexsort((-dur, ts))``: by start, longer first on ties, then by position.

    A thread's ops are nearly sorted by start already, so a stable sort by start is cheap; only
    the ops that share a start with another one are then sorted again, by duration (sorting every
    op by duration first, as lexsort does, costs 5-10x more).
    """
    o = np.argsort(ts, kind="stable")
    t = ts[o]
    same = (t[1:] == t[:-1]) | (np.isnan(t[1:]) & np.isnan(t[:-1]))  # sorting puts NaNs together
    if not same.any():
        return o
    tied = np.zeros(t.size, dtype=bool)
    tied[1:] = same
    tied[:-1] |= same
    run = np.cumsum(np.concatenate(([True], ~same)))  # which run of equal starts each op is in
    sub = np.flatnonzero(tied)
    o[sub] = o[sub][np.lexsort((-dur[o[sub]], run[sub]))]
    return o


def enclosing_chains(v: RankView, ops: ThreadOps, events: np.ndarray) -> list[list[int]]:
    """For each event: the events on ``ops``' thread that contain it, outermost first.

    Those are the ops of the event's top-level op that start no later than the event and end no
    earlier (the event itself left out). A top-level op can hold thousands of ops, so instead of
    scanning them, each event walks down from the last op starting no later than it to the next
    op that ends late enough, found in O(log n) with a range-maximum table; the walk is
    vectorised over the events, one step per chain level.
    """
    events = np.asarray(events, dtype=np.int64)
    chains: list[list[int]] = [[] for _ in range(events.size)]
    if events.size == 0 or ops.top.size == 0:
        return chains
    t0, t1 = v.ts[events], v.end[events]
    last = ops.ts.searchsorted(t0, side="right") - 1
    tp = ops.top_ts.searchsorted(t0, side="right") - 1
    first = ops.top[np.maximum(tp, 0)]
    hi = np.where(tp >= 0, last, -1)  # walk positions first..hi, downwards; hi < first: done
    own = events.tolist()
    active = np.flatnonzero(hi >= first)
    while active.size:
        r = _last_reaching(ops, first[active], hi[active], t1[active])
        active, r = active[r >= 0], r[r >= 0]
        for e, j in zip(active.tolist(), ops.index[r].tolist(), strict=True):
            if j != own[e]:
                chains[e].append(j)
        hi[active] = r - 1
        active = active[hi[active] >= first[active]]
    for c in chains:
        c.reverse()
    return chains


def _last_reaching(ops: ThreadOps, lo: np.ndarray, hi: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per query: the last position in ``[lo, hi]`` whose op ends at or after ``x``, else -1.

    Greedy from the right over the range-maximum table: a block of 2**j ops whose latest end is
    before ``x`` holds no answer and is skipped whole, largest blocks first.
    """
    table = _end_max(ops)
    c = hi + 1  # exclusive right end of what is left
    for j in range(len(table) - 1, -1, -1):
        b = c - (1 << j)
        skip = b >= lo
        skip &= table[j][np.where(skip, b, 0)] < x
        c = np.where(skip, b, c)
    r = c - 1
    found = (r >= lo) & (ops.end[np.maximum(r, 0)] >= x)
    return np.where(found, r, -1)


def _end_max(ops: ThreadOps) -> list[np.ndarray]:
    """Range-maximum (sparse) table of the ops' ends, up to blocks as long as the longest
    top-level group: every query range lies inside one group."""
    if not ops.end_max:
        longest = int(np.diff(np.append(ops.top, ops.index.size)).max())
        level = np.fmax(ops.end, -np.inf)  # NaN ends never contain anything: make them -inf
        table = [level]
        w = 1
        while 2 * w <= longest:
            level = np.maximum(level[:-w], level[w:])
            table.append(level)
            w *= 2
        ops.end_max[:] = table
    return ops.end_max


@lru_cache(maxsize=65536)
def user_site(frame: str) -> str | None:
    """``file.py:line`` for a Python frame in user code (not torch, site-packages, stdlib)."""
    m = _USER_FRAME_RE.match(frame.strip())
    if not m or _LIB_RE.search(m.group("file")):
        return None
    return f"{m.group('file')}:{m.group('line')}"


def sites_for(
    v: RankView, ops: ThreadOps, events: np.ndarray, chains: list[list[int]] | None = None
) -> list[str | None]:
    """The user's frame of each of ``events`` (on ``ops``' thread): from the event's own ``Call
    stack`` arg, else from the ops or python_function events enclosing it (innermost user frame).
    ``chains``: their enclosing chains, if the caller has them already."""
    events = np.asarray(events, dtype=np.int64)
    py_cat = _python_cat_codes(v)
    if not py_cat and not any(v.ev.stacks):  # no python_function events, no Call stack: no sites
        return [None] * events.size
    out = [_stack_site(v, code) for code in v.ev.stack[events].tolist()]
    need = [k for k, s in enumerate(out) if s is None]
    if not need:
        return out
    if chains is None:
        chains = enclosing_chains(v, ops, events[need])
    else:
        chains = [chains[k] for k in need]
    op_site: dict[int, str | None] = {}  # chains share their outer ops: look each one up once
    for k, chain in zip(need, chains, strict=True):
        for j in reversed(chain):
            if j not in op_site:
                op_site[j] = _op_site(v, j, py_cat)
            if op_site[j]:
                out[k] = op_site[j]
                break
    return out


def _op_site(v: RankView, j: int, py_cat: set[int]) -> str | None:
    """The user's frame of one enclosing op: its ``Call stack``, or its own name for a
    python_function event."""
    s = _stack_site(v, int(v.ev.stack[j]))
    if s is None and int(v.ev.cat[j]) in py_cat:
        s = user_site(v.name(j))
    return s


def _stack_site(v: RankView, code: int) -> str | None:
    if code < 0:
        return None
    return _first_user_frame(v.ev.stacks[code])


@lru_cache(maxsize=16384)
def _first_user_frame(stack: str) -> str | None:
    for frame in stack.split(";"):
        s = user_site(frame)
        if s:
            return s
    return None


def _python_cat_codes(v: RankView) -> set[int]:
    return {i for i, c in enumerate(v.ev.cats) if c == "python_function"}


@dataclass
class HostOps:
    """PyTorch's ``aten::`` ops on the host: how many ran, and their mean duration."""

    count: int
    mean_us: float | None


def host_ops(v: RankView) -> HostOps:
    """The rank's ``aten::`` CPU ops (what ``dispatch`` counts for a run)."""
    ops = (
        (~v.on_stream)
        & v.ev.has_cat(("cpu_op", "Operator"))
        & v.ev.has_name(lambda n: n.startswith("aten::"))
    )
    n = int(ops.sum())
    return HostOps(n, float(v.dur[ops].mean()) if n else None)
