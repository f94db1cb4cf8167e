"""Why the GPU was idle: the host activity that covered each GPU idle interval.

HTA classifies idle time by *when* the next kernel was launched (host wait / kernel wait / other)
but not by *what the host was doing instead*, so most idle time ends up as "host wait" with no
cause. Here every idle interval of the device (gaps in the union of all GPU work between the
first and last GPU event) is laid over the launching thread's timeline: the thread that launched
the GPU event right after the gap. Each µs of the gap is attributed to the first matching
activity in this order:

1. ``dataloader``  – inside a DataLoader ``__next__`` (waiting for the next batch);
2. ``sync``        – inside a host-blocking call (stream/device/event synchronize, a blocking or
                     pageable copy) or the op that issued it (``aten::item``,
                     ``aten::_local_scalar_dense``, ``aten::to``...);
3. ``optimizer``   – inside ``Optimizer.step``/``zero_grad``;
4. ``launch``      – inside a CUDA runtime call (launch overhead);
5. ``cpu_op``      – inside any other PyTorch op or user annotation;
6. ``python``      – inside Python code only (recorded with ``with_stack``);
7. ``untraced``    – nothing recorded on the thread (plain Python between ops when stacks were
                     not recorded, or the process doing something the profiler does not see).

Per step, per rank and per call site (op name, and the user's Python frame where the trace has
stacks), summed in µs.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from gpuopt.trace import intervals as iv
from gpuopt.trace.array_stats import unique
from gpuopt.trace.cpu_ops import ThreadOps, enclosing_chains, sites_for, thread_ops, user_site
from gpuopt.trace.prepare import RankView
from gpuopt.trace.steps import OP_CATS, RUNTIME_CATS, is_dataloader, step_windows

CAUSES = ("dataloader", "sync", "optimizer", "launch", "cpu_op", "python", "untraced")


def idle_gaps(v: RankView) -> iv.Intervals:
    busy = iv.merge(v.ts[v.on_stream], v.end[v.on_stream])
    if busy[0].size < 2:
        return iv.empty()
    s, e = busy[1][:-1], busy[0][1:]
    keep = e > s
    return s[keep], e[keep]


def idle_causes(v: RankView, ra: Any) -> dict[str, Any]:
    gs, ge = idle_gaps(v)
    result: dict[str, Any] = {
        "gaps": int(gs.size),
        "idle_us": float((ge - gs).sum()),
        "by_cause": {c: 0.0 for c in CAUSES},
    }
    result["by_step"] = []
    result["sites"] = []
    if gs.size == 0:
        return result
    # launching thread of the GPU event that ends each gap
    gpu_idx = np.flatnonzero(v.on_stream)
    o = np.argsort(v.ts[gpu_idx], kind="stable")
    gpu_sorted = gpu_idx[o]
    pos = np.minimum(np.searchsorted(v.ts[gpu_sorted], ge, side="left"), gpu_sorted.size - 1)
    nxt = gpu_sorted[pos]
    rt = v.runtime_index[nxt]
    launched = v.runtime_index[v.runtime_index >= 0]
    main_thread = int(np.bincount(v.ev.thread[launched]).argmax()) if launched.size else -1
    thread = np.where(rt >= 0, v.ev.thread[np.maximum(rt, 0)], main_thread)

    per_gap = np.zeros((gs.size, len(CAUSES)))
    sites: dict[tuple[str, str, str | None], float] = defaultdict(float)
    sync_by_call = {c["index"]: c for c in ra.syncs}
    # per name / category code: what kind of host activity it is
    is_step = _name_table(v, lambda n: n.startswith("ProfilerStep"))
    is_dl = _name_table(v, is_dataloader)
    is_opt = _name_table(v, lambda n: n.startswith("Optimizer.") or n.startswith("Optimizer#"))
    is_runtime, is_python, is_op = (
        _cat_table(v, c) for c in (RUNTIME_CATS, ("python_function",), OP_CATS)
    )
    for th in unique(thread).tolist():
        if th < 0:
            per_gap[thread == th, CAUSES.index("untraced")] = (ge - gs)[thread == th]
            continue
        sel = np.flatnonzero(thread == th)
        gaps = (gs[sel], ge[sel])
        ops = thread_ops(v, th)
        idx = ops.index
        cats = v.ev.cat[idx]
        codes = v.ev.name[idx]
        cat_runtime = is_runtime[cats]
        cat_py = is_python[cats]
        cat_op = is_op[cats] & ~cat_py
        not_step = ~is_step[codes]
        dl = is_dl[codes] & not_step
        opt = is_opt[codes]
        sync_idx_arr = _sync_ops(
            v, ops, [i for i, call in sync_by_call.items() if call["thread"] == th]
        )
        layers = [
            ("dataloader", iv.merge(v.ts[idx[dl]], v.end[idx[dl]])),
            ("sync", iv.merge(v.ts[sync_idx_arr], v.end[sync_idx_arr])),
            ("optimizer", iv.merge(v.ts[idx[opt]], v.end[idx[opt]])),
            ("launch", iv.merge(v.ts[idx[cat_runtime]], v.end[idx[cat_runtime]])),
            ("cpu_op", iv.merge(v.ts[idx[cat_op & not_step]], v.end[idx[cat_op & not_step]])),
            ("python", iv.merge(v.ts[idx[cat_py]], v.end[idx[cat_py]])),
        ]
        remaining = iv.merge(*gaps)
        for cause, layer in layers:
            part, rest = iv.split(remaining, layer)
            per_gap[sel, CAUSES.index(cause)] = iv.covered_in_windows(part, gaps[0], gaps[1])
            _add_sites(
                v,
                ops,
                cause,
                part,
                idx,
                sync_idx_arr if cause == "sync" else None,
                dl,
                opt,
                cat_op & not_step,
                cat_py,
                sync_by_call,
                sites,
            )
            remaining = rest
        per_gap[sel, CAUSES.index("untraced")] = iv.covered_in_windows(remaining, gaps[0], gaps[1])

    result["by_cause"] = {c: float(per_gap[:, k].sum()) for k, c in enumerate(CAUSES)}
    ws, we = step_windows(v)
    if ws.size:
        # windows are sorted and disjoint: each gap belongs to the window its start falls in
        k = np.searchsorted(ws, gs, side="right") - 1
        inside = (k >= 0) & (gs < we[np.maximum(k, 0)])
        kk = k[inside]
        gaps_n = np.bincount(kk, minlength=ws.size)
        idle_s = np.bincount(kk, weights=(ge - gs)[inside], minlength=ws.size)
        per_gap_in = per_gap[inside]
        per_cause = [
            np.bincount(kk, weights=per_gap_in[:, j], minlength=ws.size) for j in range(len(CAUSES))
        ]
        for i, st in enumerate(v.steps):
            row = {"step": st.number, "gaps": int(gaps_n[i]), "idle_us": float(idle_s[i])}
            row.update({c: float(per_cause[j][i]) for j, c in enumerate(CAUSES)})
            result["by_step"].append(row)
    top = sorted(sites.items(), key=lambda kv: -kv[1])[:15]
    result["sites"] = [
        {"cause": c, "op": op, "site": site, "idle_us": float(us)}
        for (c, op, site), us in top
        if us > 0
    ]
    return result


def _name_table(v: RankView, pred: Any) -> np.ndarray:
    """``pred`` of every name in the string table, as a mask indexed by name code."""
    return np.fromiter((bool(pred(n)) for n in v.ev.names), dtype=np.bool_, count=len(v.ev.names))


def _cat_table(v: RankView, wanted: tuple[str, ...]) -> np.ndarray:
    """Category in ``wanted``, as a mask indexed by category code."""
    return np.fromiter((c in wanted for c in v.ev.cats), dtype=np.bool_, count=len(v.ev.cats))


def _sync_ops(v: RankView, ops: ThreadOps, calls: list[int]) -> np.ndarray:
    """The outermost op that issued each sync call on this thread (or the call itself), sorted."""
    out = set()
    chains = enclosing_chains(v, ops, np.asarray(calls, dtype=np.int64))
    for i, enclosing in zip(calls, chains, strict=True):
        chain = [
            j
            for j in enclosing
            if not (v.name(j).startswith("ProfilerStep") or is_dataloader(v.name(j)))
        ]
        ops_chain = [j for j in chain if v.ev.cats[int(v.ev.cat[j])] in ("cpu_op", "Operator")]
        out.add(ops_chain[0] if ops_chain else i)
    return np.array(sorted(out), dtype=np.int64)


def _add_sites(v, ops, cause, part, idx, sync_idx, dl, opt, cat_op, cat_py, sync_by_call, sites):  # type: ignore[no-untyped-def]
    """Credit the idle time in ``part`` to the events of ``cause`` that cover it (named, with a site)."""
    if part[0].size == 0 or cause in ("launch", "untraced"):
        return
    if cause == "sync":
        cand = sync_idx
    else:
        m = {"dataloader": dl, "optimizer": opt, "cpu_op": cat_op, "python": cat_py}[cause]
        cand = idx[m]
        # outermost events only (children would double count)
        if cand.size:
            e = v.end[cand]
            prev = np.maximum.accumulate(e)
            top = np.ones(cand.size, dtype=bool)
            top[1:] = v.ts[cand][1:] >= prev[:-1]
            cand = cand[top]
    if cand is None or cand.size == 0:
        return
    covered = iv.covered_in_windows(part, v.ts[cand], v.end[cand])
    hit_mask = covered > 0
    hit = cand[hit_mask]
    if cause == "python":
        for j, us in zip(hit.tolist(), covered[hit_mask].tolist(), strict=True):
            name = v.name(j)
            site = user_site(name)
            sites[(cause, name if site is None else "python", site)] += us
        return
    for j, us, site in zip(
        hit.tolist(), covered[hit_mask].tolist(), sites_for(v, ops, hit), strict=True
    ):
        sites[(cause, v.name(j), site)] += us
