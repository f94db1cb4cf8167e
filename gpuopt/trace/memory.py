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

import numpy as np

from gpuopt.model.trace import MemoryOps, NameTotal, SyncCall, TraceTransfer
from gpuopt.trace.array_stats import member, unique
from gpuopt.trace.cpu_ops import enclosing_chains, sites_for, thread_ops
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
_DIR_ALIASES = {
    "HostToDevice": "HtoD",
    "DeviceToHost": "DtoH",
    "DeviceToDevice": "DtoD",
    "HostToHost": "HtoH",
}


def copy_kind(name: str) -> tuple[str, bool]:
    """("HtoD"|"DtoH"|"DtoD"|"PtoP"|...|"Memset", pageable?) from a memory event's name."""
    if name.startswith("Memset"):
        return "Memset", False
    m = _DIR_RE.match(name)
    direction = _DIR_ALIASES.get(m.group(1), m.group(1)) if m else "Memcpy"
    ends = _ENDS_RE.search(name)
    pageable = bool(ends and "Pageable" in (ends.group(1), ends.group(2)))
    return direction, pageable


def memory_ops(v: RankView) -> list[MemoryOps]:
    """Rows per (direction, pageable): count, GPU µs, bytes, GB/s."""
    idx = np.flatnonzero(v.on_stream & (v.ktype == MEMORY))
    # per kind: count, GPU µs, bytes, events that say their bytes
    acc: dict[tuple[str, bool], list[float]] = defaultdict(lambda: [0, 0.0, 0, 0])
    kinds = {}
    for code in unique(v.ev.name[idx]).tolist():
        kinds[code] = copy_kind(v.ev.names[code])
    for code, kind in kinds.items():
        m = idx[v.ev.name[idx] == code]
        b = v.ev.bytes[m]
        a = acc[kind]
        a[0] += int(m.size)
        a[1] += float(v.dur[m].sum())
        a[2] += int(b[b > 0].sum())
        a[3] += int((b > 0).sum())
    return [
        MemoryOps(
            direction=direction,
            pageable=pageable if direction != "Memset" else None,
            count=int(count),
            time_us=float(time_us),
            bytes=int(nbytes),
            bandwidth_gbps=(nbytes / (time_us * 1e3)) if time_us > 0 and with_bytes else None,
        )
        for (direction, pageable), (count, time_us, nbytes, with_bytes) in sorted(
            acc.items(), key=lambda kv: -kv[1][1]
        )
    ]


def memcpy_by_name(v: RankView) -> dict[str, NameTotal]:
    """HTA-style totals per memory event name: its count and summed GPU µs."""
    idx = np.flatnonzero(v.on_stream & (v.ktype == MEMORY))
    out: dict[str, NameTotal] = {}
    for code in unique(v.ev.name[idx]).tolist():
        m = idx[v.ev.name[idx] == code]
        out[v.ev.names[code]] = NameTotal(count=int(m.size), sum=float(v.dur[m].sum()))
    return out


def sync_calls(v: RankView) -> list[SyncCall]:
    """Every host-blocking call: the API, the ops that issued it, the user's site, its time."""
    cpu = ~v.on_stream
    calls = np.flatnonzero(cpu & v.ev.has_name(lambda n: n in SYNC_APIS))
    all_calls = np.sort(np.concatenate([calls, _blocking_async_copies(v)]))
    threads = v.ev.thread[all_calls]
    chain_of: dict[int, list[int]] = {}
    site_of: dict[int, str | None] = {}
    for th in unique(threads).tolist():
        mine = all_calls[threads == th]
        ops = thread_ops(v, th)
        chains = enclosing_chains(v, ops, mine)
        chain_of.update(zip(mine.tolist(), chains, strict=True))
        site_of.update(zip(mine.tolist(), sites_for(v, ops, mine, chains), strict=True))
    out: list[SyncCall] = []
    for i, th in zip(all_calls.tolist(), threads.tolist(), strict=True):
        chain = [j for j in chain_of[i] if _is_op(v, j)]
        api = v.name(i)
        blocking_copy = api in ASYNC_COPY_APIS or api.endswith("Memcpy")
        out.append(
            SyncCall(
                index=i,
                api=api,
                kind="blocking_copy" if blocking_copy else "synchronize",
                thread=th,
                ts=float(v.ts[i]),
                dur_us=float(v.dur[i]),
                op=v.name(chain[-1]) if chain else None,
                outer_op=v.name(chain[0]) if chain else None,
                site=site_of[i],
            )
        )
    return out


def _blocking_async_copies(v: RankView) -> np.ndarray:
    """Async copy calls that block anyway: their GPU copy touches pageable memory."""
    acopies = np.flatnonzero(~v.on_stream & v.ev.has_name(lambda n: n in ASYNC_COPY_APIS))
    if acopies.size == 0:
        return np.zeros(0, dtype=np.int64)
    g = np.flatnonzero(v.on_stream & (v.runtime_index >= 0))
    g = g[member(v.runtime_index[g], acopies)]
    # name of the GPU event of each call (the last one, if several); pageable? per name
    name_of = dict(zip(v.runtime_index[g].tolist(), v.ev.name[g].tolist(), strict=True))
    pageable = {c: copy_kind(v.ev.names[c])[1] for c in set(name_of.values())}
    blocking = [ci for ci in acopies.tolist() if ci in name_of and pageable[name_of[ci]]]
    return np.asarray(blocking, dtype=np.int64)


def _is_op(v: RankView, j: int) -> bool:
    n = v.name(j)
    return not n.startswith("ProfilerStep") and v.ev.cats[int(v.ev.cat[j])] in (
        "cpu_op",
        "Operator",
    )


def transfers(v: RankView) -> list[TraceTransfer]:
    """Copies grouped by (direction, pageable, user call site): count, bytes, GPU µs."""
    idx = np.flatnonzero(v.on_stream & (v.ktype == MEMORY))
    kinds = {c: copy_kind(v.ev.names[c]) for c in unique(v.ev.name[idx]).tolist()}
    copies = idx[np.array([kinds[c][0] != "Memset" for c in v.ev.name[idx].tolist()], dtype=bool)]
    acc: dict[tuple[str, bool, str | None], list[float]] = defaultdict(lambda: [0, 0, 0.0])
    names, sites = v.ev.name[copies].tolist(), _launch_sites(v, copies)
    sizes, durs = np.maximum(v.ev.bytes[copies], 0).tolist(), v.dur[copies].tolist()
    for code, site, nbytes, dur in zip(names, sites, sizes, durs, strict=True):
        direction, pageable = kinds[code]
        a = acc[(direction, pageable, site)]
        a[0] += 1
        a[1] += nbytes
        a[2] += dur
    return [
        TraceTransfer(direction=d, pageable=p, site=s, count=int(n), bytes=int(b), time_us=float(t))
        for (d, p, s), (n, b, t) in sorted(acc.items(), key=lambda kv: -kv[1][2])
    ]


def _launch_sites(v: RankView, gpu: np.ndarray) -> list[str | None]:
    """The user's call site of each GPU event's launch call (None where it has no launch)."""
    launch = v.runtime_index[gpu]
    out: list[str | None] = [None] * gpu.size
    has = np.flatnonzero(launch >= 0)
    threads = v.ev.thread[launch[has]]
    for th in unique(threads).tolist():
        pos = has[threads == th]
        for k, s in zip(pos.tolist(), sites_for(v, thread_ops(v, th), launch[pos]), strict=True):
            out[k] = s
    return out
