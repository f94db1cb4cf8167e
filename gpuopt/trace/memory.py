"""Memory copies and sets (by direction, pageable vs pinned) and host-blocking sync calls.

Copies are GPU events named ``Memcpy <DIR> (<src> -> <dst>)``; bandwidth = bytes / GPU time.
A sync call is a CUDA/HIP runtime call that blocks the host until the device (or a stream, or an
event) is done, plus blocking copies: ``cudaMemcpy`` and any copy to or from *pageable* host
memory (CUDA must stage it, so ``cudaMemcpyAsync`` on pageable memory blocks the host too).
For each call we name the op that issued it (outermost and innermost enclosing CPU op).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import numpy as np

from gpuopt.trace.cpu_ops import enclosing_chain, site_for, thread_ops
from gpuopt.trace.prepare import MEMORY, RankView

SYNC_APIS = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cudaMemset",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
    "cuMemcpyDtoH_v2",
    "hipStreamSynchronize",
    "hipDeviceSynchronize",
    "hipEventSynchronize",
    "hipMemcpy",
)
ASYNC_COPY_APIS = ("cudaMemcpyAsync", "hipMemcpyAsync", "hipMemcpyWithStream")
_DIR_RE = re.compile(r"^Memcpy\s+(\w+)")
_ENDS_RE = re.compile(r"\((\w+)\s*->\s*(\w+)\)")
_DIR_ALIASES = {"HostToDevice": "HtoD", "DeviceToHost": "DtoH", "DeviceToDevice": "DtoD", "HostToHost": "HtoH"}


def copy_kind(name: str) -> tuple[str, bool]:
    """("HtoD"|"DtoH"|"DtoD"|"PtoP"|...|"Memset", pageable?) from a memory event's name."""
    if name.startswith("Memset"):
        return "Memset", False
    m = _DIR_RE.match(name)
    direction = _DIR_ALIASES.get(m.group(1), m.group(1)) if m else "Memcpy"
    ends = _ENDS_RE.search(name)
    pageable = bool(ends and "Pageable" in (ends.group(1), ends.group(2)))
    return direction, pageable


def memory_ops(v: RankView) -> list[dict[str, Any]]:
    """Rows per (direction, pageable): count, GPU µs, bytes, GB/s."""
    idx = np.flatnonzero(v.on_stream & (v.ktype == MEMORY))
    acc: dict[tuple[str, bool], list[float]] = defaultdict(lambda: [0, 0.0, 0, 0])
    kinds = {}
    for code in np.unique(v.ev.name[idx]):
        kinds[int(code)] = copy_kind(v.ev.names[int(code)])
    for code, kind in kinds.items():
        m = idx[v.ev.name[idx] == code]
        b = v.ev.bytes[m]
        a = acc[kind]
        a[0] += int(m.size)
        a[1] += float(v.dur[m].sum())
        a[2] += int(b[b > 0].sum())
        a[3] += int((b > 0).sum())
    rows = []
    for (direction, pageable), (count, time_us, nbytes, with_bytes) in sorted(acc.items(), key=lambda kv: -kv[1][1]):
        rows.append(
            {
                "direction": direction,
                "pageable": pageable if direction != "Memset" else None,
                "count": int(count),
                "time_us": float(time_us),
                "bytes": int(nbytes),
                "bandwidth_gbps": (nbytes / (time_us * 1e3)) if time_us > 0 and with_bytes else None,
            }
        )
    return rows


def memcpy_by_name(v: RankView) -> dict[str, dict[str, float]]:
    """HTA-style totals per memory event name: {name: {count, sum}}."""
    idx = np.flatnonzero(v.on_stream & (v.ktype == MEMORY))
    out: dict[str, dict[str, float]] = {}
    for code in np.unique(v.ev.name[idx]):
        m = idx[v.ev.name[idx] == code]
        out[v.ev.names[int(code)]] = {"count": int(m.size), "sum": float(v.dur[m].sum())}
    return out


def sync_calls(v: RankView) -> list[dict[str, Any]]:
    """Every host-blocking call: ``{index, api, kind, thread, ts, dur_us, op, outer_op}``."""
    sync_codes = v.ev.name_codes(lambda n: n in SYNC_APIS)
    async_codes = v.ev.name_codes(lambda n: n in ASYNC_COPY_APIS)
    cpu = ~v.on_stream
    calls = np.flatnonzero(cpu & np.isin(v.ev.name, sync_codes))
    # async copies that touch pageable memory block too: find their GPU copy via correlation
    acopies = np.flatnonzero(cpu & np.isin(v.ev.name, async_codes))
    blocking_async: list[int] = []
    if acopies.size:
        gpu_of: dict[int, int] = {}
        g = np.flatnonzero(v.on_stream & (v.runtime_index >= 0))
        for gi, ci in zip(g.tolist(), v.runtime_index[g].tolist(), strict=True):
            gpu_of[ci] = gi
        for ci in acopies.tolist():
            g_i = gpu_of.get(ci)
            if g_i is not None and copy_kind(v.name(g_i))[1]:
                blocking_async.append(ci)
    all_calls = np.concatenate([calls, np.asarray(blocking_async, dtype=np.int64)])
    out: list[dict[str, Any]] = []
    ops_cache: dict[int, Any] = {}
    for i in np.sort(all_calls).tolist():
        th = int(v.ev.thread[i])
        if th not in ops_cache:
            ops_cache[th] = thread_ops(v, th)
        chain = [j for j in enclosing_chain(v, ops_cache[th], i) if _is_op(v, j)]
        api = v.name(i)
        out.append(
            {
                "index": i,
                "api": api,
                "kind": "blocking_copy" if api in ASYNC_COPY_APIS or api.endswith("Memcpy") else "synchronize",
                "thread": th,
                "ts": float(v.ts[i]),
                "dur_us": float(v.dur[i]),
                "op": v.name(chain[-1]) if chain else None,
                "outer_op": v.name(chain[0]) if chain else None,
                "site": site_for(v, ops_cache[th], i),
            }
        )
    return out


def _is_op(v: RankView, j: int) -> bool:
    n = v.name(j)
    return not n.startswith("ProfilerStep") and v.ev.cats[int(v.ev.cat[j])] in ("cpu_op", "Operator")


def transfers(v: RankView) -> list[dict[str, Any]]:
    """Copies grouped by (direction, pageable, user call site): count, bytes, GPU µs."""
    idx = np.flatnonzero(v.on_stream & (v.ktype == MEMORY))
    acc: dict[tuple[str, bool, str | None], list[float]] = defaultdict(lambda: [0, 0, 0.0])
    ops_cache: dict[int, Any] = {}
    kinds = {int(c): copy_kind(v.ev.names[int(c)]) for c in np.unique(v.ev.name[idx])}
    for i in idx.tolist():
        direction, pageable = kinds[int(v.ev.name[i])]
        if direction == "Memset":
            continue
        site = None
        ci = int(v.runtime_index[i])
        if ci >= 0:
            th = int(v.ev.thread[ci])
            if th not in ops_cache:
                ops_cache[th] = thread_ops(v, th)
            site = site_for(v, ops_cache[th], ci)
        a = acc[(direction, pageable, site)]
        a[0] += 1
        a[1] += max(int(v.ev.bytes[i]), 0)
        a[2] += float(v.dur[i])
    return [
        {"direction": d, "pageable": p, "site": s, "count": int(n), "bytes": int(b), "time_us": float(t)}
        for (d, p, s), (n, b, t) in sorted(acc.items(), key=lambda kv: -kv[1][2])
    ]
