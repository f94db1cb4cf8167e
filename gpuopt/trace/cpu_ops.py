"""Host-side structure: which CPU op encloses a given moment on a thread.

Used to name the op behind a sync call (``aten::item`` → ``aten::_local_scalar_dense`` →
``cudaStreamSynchronize``) and the host activity during a GPU idle gap. Ops on one thread nest
properly (the profiler records a call stack), so the outermost op around a time is found by a
binary search over the thread's top-level ops, and the chains of enclosing ops of many events at
once by a vectorised walk down a range-maximum table (:func:`enclosing_chains`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

import msgspec
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


class ThreadOps(msgspec.Struct):
    """The CPU events of one thread, sorted by start (longer first on ties: parents before
    children)."""

    index: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    top: np.ndarray  # positions (into index) of top-level events
    top_ts: np.ndarray
    top_end: np.ndarray
    # range-maximum table of ``end`` (level j: max over 2**j consecutive ops), built on first use
    end_max: list[np.ndarray] = msgspec.field(default_factory=list)


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
    vectorised over the events, one step per chain level. Few events are scanned instead
    (:func:`_scan_pays`).
    """
    events = np.asarray(events, dtype=np.int64)
    chains: list[list[int]] = [[] for _ in range(events.size)]
    if events.size == 0 or ops.top.size == 0:
        return chains
    first, hi, t1 = _ranges(v, ops, events)
    own = events.tolist()
    if _scan_pays(first, hi):
        return _scanned_chains(ops, first, hi, t1, own, chains)

    def visit(active: list[int], found: list[int]) -> None:
        for e, j in zip(active, found, strict=True):
            if j != own[e]:
                chains[e].append(j)

    _walk(ops, first, hi, t1, visit)
    for c in chains:
        c.reverse()
    return chains


def _ranges(
    v: RankView, ops: ThreadOps, events: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per event: the positions its enclosing ops lie in (``first..hi`` of ``ops``: from its
    top-level op to the last op starting no later than it; ``hi < first``: none, as for an event
    without a finite end), and its end."""
    t0, t1 = v.ts[events], v.end[events]
    last = ops.ts.searchsorted(t0, side="right") - 1
    tp = ops.top_ts.searchsorted(t0, side="right") - 1
    first = ops.top[np.maximum(tp, 0)]
    return first, np.where((tp >= 0) & np.isfinite(t1), last, -1), t1


def _walk(
    ops: ThreadOps,
    first: np.ndarray,
    hi: np.ndarray,
    t1: np.ndarray,
    visit: Callable[[list[int], list[int]], list[bool] | None],
) -> None:
    """The events' enclosing ops, innermost first, one level per step: ``visit(events, ops)``
    gets the events (positions into ``first``) that found one more, and that op's index; it
    returns which of those events are done (None: none is), or they walk on outwards."""
    active = np.flatnonzero(hi >= first)
    while active.size:
        r = _last_reaching(ops, first[active], hi[active], t1[active])
        active, r = active[r >= 0], r[r >= 0]
        done = visit(active.tolist(), ops.index[r].tolist())
        hi[active] = r - 1
        going = hi[active] >= first[active]
        if done is not None:
            going &= ~np.array(done, dtype=bool).reshape(-1)
        active = active[going]


# The walk costs numpy calls per chain level and table level (~7 ms for 8 events 41 ops deep
# among 198,094 ops on TraceLens' Flux.1 capture, the table's build aside); scanning each event's
# range is one comparison per op in it (0.5 ms for those 8 events' 871,548 ops; 4M ops, the most
# scanned, a few ms), measured (docs/bench-trace.md).
SCAN_MAX_EVENTS = 256
SCAN_MAX_OPS = 1 << 22


def _scan_pays(first: np.ndarray, hi: np.ndarray) -> bool:
    """Whether scanning every event's range beats the walk: few events, few ops in their ranges
    together."""
    if first.size > SCAN_MAX_EVENTS:
        return False
    return int(np.maximum(hi - first + 1, 0).sum()) <= SCAN_MAX_OPS


def _scanned_chains(
    ops: ThreadOps,
    first: np.ndarray,
    hi: np.ndarray,
    t1: np.ndarray,
    own: list[int],
    chains: list[list[int]],
) -> list[list[int]]:
    """:func:`enclosing_chains` by scanning: the ops in an event's range that end at or after it
    (a NaN end never does), in start order, the event itself left out; what the walk finds one
    level at a time."""
    for e, (lo, top, x) in enumerate(zip(first.tolist(), hi.tolist(), t1.tolist(), strict=True)):
        if top < lo:
            continue
        found = ops.index[lo + np.flatnonzero(ops.end[lo : top + 1] >= x)].tolist()
        chains[e] = [j for j in found if j != own[e]]
    return chains


# The walk's table holds the maxima of blocks of BLOCK ops, not of every op: on the Flux.1
# capture's 198,094 ops a table over every op took 17 levels (27 MB, ~30 ms to build, measured);
# over blocks of 16 it takes 1.2 MB, each step scanning the two part blocks at its ends.
BLOCK = 16
_IN_BLOCK = np.arange(BLOCK)


def _last_reaching(ops: ThreadOps, lo: np.ndarray, hi: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per query: the last position in ``[lo, hi]`` whose op ends at or after ``x``, else -1.

    In ``hi``'s block, by scanning it; else in the last whole block before it that holds one,
    found greedily from the right over the range-maximum table of the blocks (a run of 2**j
    blocks whose latest end is before ``x`` holds no answer and is skipped whole, longest runs
    first); else in ``lo``'s block.
    """
    ends, *table = _end_max(ops)
    hb = hi // BLOCK
    last = _in_block(ends, hb, lo, hi, x)
    lb = -(-lo // BLOCK)  # the first whole block
    c = hb.copy()  # exclusive right end, in blocks, of what is left
    for j in range(len(table) - 1, -1, -1):
        b = c - (1 << j)
        skip = b >= lb
        skip &= table[j][np.where(skip, b, 0)] < x
        c = np.where(skip, b, c)
    k = c - 1
    k = np.where((k >= lb) & (table[0][np.maximum(k, 0)] >= x), k, -1)
    last = np.where(last >= 0, last, _in_block(ends, k, lo, hi, x))
    return np.where(last >= 0, last, _in_block(ends, lo // BLOCK, lo, hi, x))


def _in_block(
    ends: np.ndarray, block: np.ndarray, lo: np.ndarray, hi: np.ndarray, x: np.ndarray
) -> np.ndarray:
    """Per query: the last position of ``block`` (-1: none) in ``[lo, hi]`` whose end is at or
    after ``x``, else -1."""
    pos = np.maximum(block, 0)[:, None] * BLOCK + _IN_BLOCK
    ok = (pos >= lo[:, None]) & (pos <= hi[:, None]) & (ends[pos] >= x[:, None])
    ok &= (block >= 0)[:, None]
    back = np.argmax(ok[:, ::-1], axis=1)  # the last True of each row, from the right
    return np.where(ok.any(axis=1), pos[:, 0] + BLOCK - 1 - back, -1)


def _end_max(ops: ThreadOps) -> list[np.ndarray]:
    """The ops' ends padded to whole blocks (NaN ends as -inf: they never contain anything),
    then the range-maximum (sparse) table of the blocks' latest ends, level j over runs of 2**j
    blocks, up to the whole thread."""
    if not ops.end_max:
        n = ops.end.size
        blocks = -(-n // BLOCK)
        ends = np.full(blocks * BLOCK, -np.inf)
        ends[:n] = np.fmax(ops.end, -np.inf)
        level = ends.reshape(blocks, BLOCK).max(axis=1)
        table = [ends, level]
        w = 1
        while 2 * w <= blocks:
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
    op_site: dict[int, str | None] = {}  # chains share their outer ops: look each one up once

    def site(j: int) -> str | None:
        if j not in op_site:
            op_site[j] = _op_site(v, j, py_cat)
        return op_site[j]

    if chains is None:
        found = _innermost_sites(v, ops, events[need], site)
    else:
        found = [_first_site(chains[k], site) for k in need]
    for k, s in zip(need, found, strict=True):
        out[k] = s
    return out


def _first_site(chain: list[int], site: Callable[[int], str | None]) -> str | None:
    """The first truthy ``site`` of the ops of ``chain`` (outermost first), innermost first."""
    return next((s for j in reversed(chain) if (s := site(j))), None)


def _innermost_sites(
    v: RankView, ops: ThreadOps, events: np.ndarray, site: Callable[[int], str | None]
) -> list[str | None]:
    """Per event: the first truthy ``site`` of its enclosing ops, innermost first (None where
    none has one). The walk stops for an event at its first site: a user frame is mostly a few
    levels in, its chain tens of levels deep (41 on the Flux.1 capture)."""
    out: list[str | None] = [None] * events.size
    if ops.top.size == 0:
        return out
    first, hi, t1 = _ranges(v, ops, events)
    own = events.tolist()
    if _scan_pays(first, hi):
        chains = _scanned_chains(ops, first, hi, t1, own, [[] for _ in own])
        return [_first_site(c, site) for c in chains]

    def visit(active: list[int], found: list[int]) -> list[bool]:
        done = []
        for e, j in zip(active, found, strict=True):
            s = site(j) if j != own[e] else None
            if s:
                out[e] = s
            done.append(bool(s))
        return done

    _walk(ops, first, hi, t1, visit)
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


class HostOps(msgspec.Struct):
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
