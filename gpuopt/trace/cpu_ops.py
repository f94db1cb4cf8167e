"""Host-side structure: which CPU op encloses a given moment on a thread.

Used to name the op behind a sync call (``aten::item`` → ``aten::_local_scalar_dense`` →
``cudaStreamSynchronize``) and the host activity during a GPU idle gap. Ops on one thread nest
properly (the profiler records a call stack), so the outermost op around a time is found by a
binary search over the thread's top-level ops, and the chain of enclosing ops by a vectorised
scan of the events inside that top-level op.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from gpuopt.trace.prepare import RankView

_USER_FRAME_RE = re.compile(r"^(?P<file>[^<(]+\.py)\((?P<line>\d+)\)")
_LIB_RE = re.compile(r"(site-packages|dist-packages|/torch/|^torch/|/lib/python\d|<frozen|/gpuopt/)")
CPU_OP_CATS = ("cpu_op", "Operator", "user_annotation", "python_function", "Runtime", "cuda_runtime", "cuda_driver")


@dataclass
class ThreadOps:
    """The CPU events of one thread, sorted by start (longer first on ties: parents before children)."""

    index: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    top: np.ndarray  # positions (into index) of top-level events
    top_ts: np.ndarray
    top_end: np.ndarray


def thread_ops(v: RankView, thread: int, mask: np.ndarray | None = None) -> ThreadOps:
    m = (v.ev.thread == thread) & ~v.on_stream & v.ev.has_cat(CPU_OP_CATS)
    if mask is not None:
        m &= mask
    idx = np.flatnonzero(m)
    o = np.lexsort((-v.dur[idx], v.ts[idx]))
    idx = idx[o]
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


def outermost_at(ops: ThreadOps, t: np.ndarray) -> np.ndarray:
    """Event index of the top-level op containing each time in ``t`` (or -1)."""
    if ops.top.size == 0:
        return np.full(t.shape, -1, dtype=np.int64)
    k = np.searchsorted(ops.top_ts, t, side="right") - 1
    kc = np.maximum(k, 0)
    inside = (k >= 0) & (ops.top_end[kc] > t)
    return np.where(inside, ops.index[ops.top[kc]], -1)


def enclosing_chain(v: RankView, ops: ThreadOps, i: int) -> list[int]:
    """Events on ``ops``' thread that contain event ``i``, outermost first (vectorised scan of the
    events between the enclosing top-level op and ``i``)."""
    t0, t1 = v.ts[i], v.end[i]
    k = int(np.searchsorted(ops.ts, t0, side="right")) - 1
    if k < 0 or ops.top.size == 0:
        return []
    tp = int(np.searchsorted(ops.top_ts, t0, side="right")) - 1
    if tp < 0:
        return []
    p = int(ops.top[tp])
    sl = slice(p, k + 1)
    inside = (ops.ts[sl] <= t0) & (ops.end[sl] >= t1)
    found = ops.index[sl][inside]
    return [int(j) for j in found if j != i]


@lru_cache(maxsize=65536)
def user_site(frame: str) -> str | None:
    """``file.py:line`` for a Python frame in user code (not torch, site-packages, stdlib)."""
    m = _USER_FRAME_RE.match(frame.strip())
    if not m or _LIB_RE.search(m.group("file")):
        return None
    return f"{m.group('file')}:{m.group('line')}"


def site_for(v: RankView, ops: Any, j: int) -> str | None:
    """The user's frame for event ``j``: from its own ``Call stack`` arg, else from the ops or the
    python_function events enclosing it (innermost user frame)."""
    own = _stack_site(v, int(v.ev.stack[j]))
    if own is not None:
        return own
    py_cat = _python_cat_codes(v)
    for k in reversed(enclosing_chain(v, ops, j)):
        s = _stack_site(v, int(v.ev.stack[k]))
        if s is None and int(v.ev.cat[k]) in py_cat:
            s = user_site(v.name(k))
        if s:
            return s
    return None


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
