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
5. ``cpu_op``      – inside any other PyTorch op;
6. ``python``      – inside Python code only (recorded with ``with_stack``);
7. ``compiled_region`` – inside a torch.compile'd region (``Torch-Compiled Region``, a compiled
                     graph's call) with nothing inside it recorded at that moment;
   ``cpu_op`` again – inside a user annotation (``record_function``) with nothing else inside
                     it recorded at that moment, credited to the innermost annotation;
8. ``untraced``    – nothing recorded on the thread (plain Python between ops when stacks were
                     not recorded, or the process doing something the profiler does not see).

A compiled region or a user annotation is a container, never a cause by itself: it encloses
whatever ran inside it (a ``Torch-Compiled Region: 0/0`` span can cover a whole diffusion step, a
``record_function("model_inference")`` a whole run), so an idle moment inside it goes to what ran
inside at that moment, and a sync inside it is credited with its own span, not the container's.

Per step, per rank and per call site (op name, and the user's Python frame where the trace has
stacks), summed in µs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import msgspec
import numpy as np

from gpuopt.compile.regions import is_compiled_container
from gpuopt.model.trace import IDLE_CAUSES, CauseTimes, IdleCauses, IdleSite, StepIdle, SyncCall
from gpuopt.trace import intervals as iv
from gpuopt.trace.array_stats import unique
from gpuopt.trace.columns import BoolArray, FloatArray, IntArray
from gpuopt.trace.cpu_ops import ThreadOps, enclosing_chains, sites_for, thread_ops, user_site
from gpuopt.trace.prepare import RankView
from gpuopt.trace.steps import OP_CATS, RUNTIME_CATS, is_dataloader, step_windows

CAUSES = IDLE_CAUSES
# User annotations (record_function): containers, credited to cpu_op only for the moments with
# nothing else recorded inside them, after every other cause but untraced.
ANNOTATION_CATS = ("user_annotation",)
ANNOTATION_LAYER = "annotation"
_UNTRACED = CAUSES.index("untraced")
TOP_SITES = 15
# Idle µs credited to (cause, op name, the user's site).
SiteTimes = dict[tuple[str, str, str | None], float]


def idle_gaps(v: RankView) -> iv.Intervals:
    busy = iv.merge(v.ts[v.on_stream], v.end[v.on_stream])
    if busy[0].size < 2:
        return iv.empty()
    s, e = busy[1][:-1], busy[0][1:]
    keep = e > s
    return s[keep], e[keep]


class _HostKinds(msgspec.Struct):
    """What kind of host activity each name or category code is (masks indexed by the code)."""

    step: BoolArray
    dataloader: BoolArray
    optimizer: BoolArray
    runtime: BoolArray
    python: BoolArray
    op: BoolArray
    compiled: BoolArray  # torch.compile's containers: its regions and graph calls (by name)
    annotation: BoolArray  # user annotations (record_function), containers too (by category)

    @classmethod
    def of(cls, v: RankView) -> _HostKinds:
        return cls(
            step=_name_table(v, lambda n: n.startswith("ProfilerStep")),
            dataloader=_name_table(v, is_dataloader),
            optimizer=_name_table(
                v, lambda n: n.startswith("Optimizer.") or n.startswith("Optimizer#")
            ),
            runtime=_cat_table(v, RUNTIME_CATS),
            python=_cat_table(v, ("python_function",)),
            op=_cat_table(v, OP_CATS),
            compiled=_name_table(v, is_compiled_container),
            annotation=_cat_table(v, ANNOTATION_CATS),
        )


def idle_causes(v: RankView, syncs: list[SyncCall]) -> IdleCauses:
    """Every GPU idle µs credited to a cause (``syncs``: the rank's host-blocking calls), in
    total, per profiler step, and per call site (the largest :data:`TOP_SITES`)."""
    gs, ge = idle_gaps(v)
    if gs.size == 0:
        return IdleCauses()
    thread = _launching_threads(v, ge)
    per_gap = np.zeros((gs.size, len(CAUSES)))
    sites: SiteTimes = defaultdict(float)
    kinds = _HostKinds.of(v)
    for th in unique(thread).tolist():
        sel = np.flatnonzero(thread == th)
        if th < 0:
            per_gap[sel, _UNTRACED] = (ge - gs)[sel]
            continue
        ops = thread_ops(v, th)
        layers = _thread_layers(v, ops, kinds, [c.index for c in syncs if c.thread == th])
        per_gap[sel] = _credit_thread(v, ops, layers, (gs[sel], ge[sel]), sites)
    regions = bool(kinds.compiled.any())
    return IdleCauses(
        gaps=int(gs.size),
        idle_us=float((ge - gs).sum()),
        by_cause=_cause_times([float(per_gap[:, k].sum()) for k in range(len(CAUSES))], regions),
        by_step=_by_step(v, gs, ge, per_gap, regions),
        sites=_top_sites(sites),
    )


def _launching_threads(v: RankView, gap_ends: FloatArray) -> IntArray:
    """The thread that launched the GPU event ending each gap (events without a launch: the
    thread that launched the most; -1 when nothing was launched)."""
    gpu_idx = np.flatnonzero(v.on_stream)
    o = np.argsort(v.ts[gpu_idx], kind="stable")
    gpu_sorted = gpu_idx[o]
    pos = np.minimum(np.searchsorted(v.ts[gpu_sorted], gap_ends, side="left"), gpu_sorted.size - 1)
    rt = v.runtime_index[gpu_sorted[pos]]
    launched = v.runtime_index[v.runtime_index >= 0]
    main_thread = int(np.bincount(v.ev.thread[launched]).argmax()) if launched.size else -1
    return np.where(rt >= 0, v.ev.thread[np.maximum(rt, 0)], main_thread)


Layer = tuple[str, IntArray, iv.Intervals]  # (cause or ANNOTATION_LAYER, events, their time)


def _thread_layers(
    v: RankView, ops: ThreadOps, kinds: _HostKinds, sync_calls: list[int]
) -> list[Layer]:
    """Per cause in priority order (untraced aside), the thread's events that make it up and
    the time they cover. The containers (compiled regions, user annotations) come last, each
    covering only the moments where it is the innermost container."""
    idx = ops.index
    cats, codes = v.ev.cat[idx], v.ev.name[idx]
    cat_py = kinds.python[cats]
    compiled = kinds.compiled[codes] & ~kinds.runtime[cats]
    not_step = ~kinds.step[codes]
    annotation = kinds.annotation[cats] & ~compiled & not_step
    cat_op = kinds.op[cats] & ~cat_py & ~compiled & ~annotation
    plain = [
        ("dataloader", idx[kinds.dataloader[codes] & not_step]),
        ("sync", _sync_ops(v, ops, sync_calls, kinds.compiled)),
        ("optimizer", idx[kinds.optimizer[codes]]),
        ("launch", idx[kinds.runtime[cats]]),
        ("cpu_op", idx[cat_op & not_step]),
        ("python", idx[cat_py & ~compiled]),
    ]
    layers = [(c, e, iv.merge(v.ts[e], v.end[e])) for c, e in plain]
    containers = idx[compiled | annotation]
    in_region, in_annotation = _innermost_containers(v, containers, kinds.compiled)
    layers.append(("compiled_region", idx[compiled], in_region))
    layers.append((ANNOTATION_LAYER, idx[annotation], in_annotation))
    return layers


def _innermost_containers(
    v: RankView, containers: IntArray, compiled: BoolArray
) -> tuple[iv.Intervals, iv.Intervals]:
    """The time where the innermost of ``containers`` (one thread's, in start order, longer
    first) is a compiled region, and where it is a user annotation."""
    seg_s, seg_e, owner = _innermost(v.ts[containers], v.end[containers])
    region = compiled[v.ev.name[containers]][owner]
    return iv.merge(seg_s[region], seg_e[region]), iv.merge(seg_s[~region], seg_e[~region])


def _innermost(ts: FloatArray, end: FloatArray) -> tuple[FloatArray, FloatArray, IntArray]:
    """Intervals in start order (longer first; nested, as a thread's records are) cut into
    segments, each owned by the innermost interval open then: the latest started that has not
    ended. The segments cover the intervals' union once."""
    # segments as flat lists, appended inline: a function call per segment (46,036 on the
    # Flux.1 capture) cost more than the appends
    starts: list[float] = []
    ends: list[float] = []
    owners: list[int] = []
    t_end = end.tolist()
    stack: list[int] = []  # the intervals open at the sweep's time, innermost last
    at = -np.inf
    for k, t0 in enumerate(ts.tolist()):
        while stack and t_end[stack[-1]] <= t0:
            top = stack.pop()
            t1 = t_end[top]
            if t1 > at:
                starts.append(at)
                ends.append(t1)
                owners.append(top)
                at = t1
        if stack and t0 > at:
            starts.append(at)
            ends.append(t0)
            owners.append(stack[-1])
        at = t0
        stack.append(k)
    while stack:
        top = stack.pop()
        t1 = t_end[top]
        if t1 > at:
            starts.append(at)
            ends.append(t1)
            owners.append(top)
            at = t1
    return np.array(starts), np.array(ends), np.array(owners, dtype=np.int64)


def _credit_thread(
    v: RankView,
    ops: ThreadOps,
    layers: list[Layer],
    gaps: iv.Intervals,
    sites: SiteTimes,
) -> FloatArray:
    """Each gap's µs by cause (one row per gap): the first layer covering a moment takes it,
    what no layer covers is untraced. The sites of the credited events are added to ``sites``."""
    out = np.zeros((gaps[0].size, len(CAUSES)))
    remaining = iv.merge(*gaps)
    for layer, events, covers in layers:
        cause = "cpu_op" if layer == ANNOTATION_LAYER else layer
        part, remaining = iv.split(remaining, covers)
        out[:, CAUSES.index(cause)] += iv.covered_in_windows(part, gaps[0], gaps[1])
        if part[0].size and layer in (ANNOTATION_LAYER, "python"):
            _add_innermost_sites(v, ops, cause, part, events, sites)
        elif part[0].size and cause != "launch":
            _add_sites(v, ops, cause, part, events, sites)
    out[:, _UNTRACED] = iv.covered_in_windows(remaining, gaps[0], gaps[1])
    return out


def _cause_times(us: list[float], regions: bool) -> CauseTimes:
    """The causes' µs; ``compiled_region`` set only where the trace has compiled regions."""
    t = dict(zip(CAUSES, us, strict=True))
    out = CauseTimes(
        dataloader=t["dataloader"],
        sync=t["sync"],
        optimizer=t["optimizer"],
        launch=t["launch"],
        cpu_op=t["cpu_op"],
        python=t["python"],
        untraced=t["untraced"],
    )
    if regions:
        out.compiled_region = t["compiled_region"]
    return out


def _by_step(
    v: RankView, gs: FloatArray, ge: FloatArray, per_gap: FloatArray, regions: bool
) -> list[StepIdle]:
    """Idle time and its causes per profiler step (empty without steps)."""
    ws, we = step_windows(v)
    if not ws.size:
        return []
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
    out = []
    for i, st in enumerate(v.steps):
        c = _cause_times([float(pc[i]) for pc in per_cause], regions)
        out.append(
            StepIdle(
                step=st.number,
                gaps=int(gaps_n[i]),
                idle_us=float(idle_s[i]),
                dataloader=c.dataloader,
                sync=c.sync,
                optimizer=c.optimizer,
                launch=c.launch,
                cpu_op=c.cpu_op,
                python=c.python,
                untraced=c.untraced,
                compiled_region=c.compiled_region,
            )
        )
    return out


def _top_sites(sites: SiteTimes) -> list[IdleSite]:
    top = sorted(sites.items(), key=lambda kv: -kv[1])[:TOP_SITES]
    return [
        IdleSite(cause=c, op=op, site=site, idle_us=float(us))
        for (c, op, site), us in top
        if us > 0
    ]


def _name_table(v: RankView, pred: Callable[[str], bool]) -> BoolArray:
    """``pred`` of every name in the string table, as a mask indexed by name code."""
    return np.fromiter((bool(pred(n)) for n in v.ev.names), dtype=np.bool_, count=len(v.ev.names))


def _cat_table(v: RankView, wanted: tuple[str, ...]) -> BoolArray:
    """Category in ``wanted``, as a mask indexed by category code."""
    return np.fromiter((c in wanted for c in v.ev.cats), dtype=np.bool_, count=len(v.ev.cats))


def _sync_ops(v: RankView, ops: ThreadOps, calls: list[int], compiled: BoolArray) -> IntArray:
    """The outermost op that issued each sync call on this thread (or the call itself), sorted.
    A compiled region or graph call around it is a container, not the op that issued it
    (``compiled``: those names, by name code)."""
    out = set()
    chains = enclosing_chains(v, ops, np.asarray(calls, dtype=np.int64))
    for i, enclosing in zip(calls, chains, strict=True):
        chain = [
            j
            for j in enclosing
            if not (
                v.name(j).startswith("ProfilerStep")
                or is_dataloader(v.name(j))
                or compiled[int(v.ev.name[j])]
            )
        ]
        ops_chain = [j for j in chain if v.ev.cats[int(v.ev.cat[j])] in ("cpu_op", "Operator")]
        out.add(ops_chain[0] if ops_chain else i)
    return np.array(sorted(out), dtype=np.int64)


def _outermost(v: RankView, events: IntArray) -> IntArray:
    """The events not inside an earlier one (children would count the same time twice)."""
    if events.size == 0:
        return events
    prev = np.maximum.accumulate(v.end[events])
    top = np.ones(events.size, dtype=bool)
    top[1:] = v.ts[events][1:] >= prev[:-1]
    return events[top]


def _add_sites(
    v: RankView, ops: ThreadOps, cause: str, part: iv.Intervals, events: IntArray, sites: SiteTimes
) -> None:
    """Credit the idle time in ``part`` to the events of ``cause`` that cover it (named, with
    the user's site)."""
    cand = events if cause == "sync" else _outermost(v, events)
    if cand.size == 0:
        return
    covered = iv.covered_in_windows(part, v.ts[cand], v.end[cand])
    hit_mask = covered > 0
    hit = cand[hit_mask]
    names = v.ev.names
    for code, us, site in zip(
        v.ev.name[hit].tolist(), covered[hit_mask].tolist(), sites_for(v, ops, hit), strict=True
    ):
        sites[(cause, names[code], site)] += us


def _add_innermost_sites(
    v: RankView, ops: ThreadOps, cause: str, part: iv.Intervals, events: IntArray, sites: SiteTimes
) -> None:
    """Credit the idle time in ``part`` to the innermost of ``events`` (in start order, longer
    first) covering it. A Python frame is named by the innermost user frame that is it or
    encloses it (``python`` and its site), else by itself."""
    covered = iv.covered_in_windows(part, v.ts[events], v.end[events])
    ev = events[covered > 0]  # an event that covers some of it, and so do the events around it
    if ev.size == 0:
        return
    seg_s, seg_e, owner = _innermost(v.ts[ev], v.end[ev])
    own = np.bincount(owner, weights=iv.covered_in_windows(part, seg_s, seg_e), minlength=ev.size)
    hit = np.flatnonzero(own > 0)
    names, codes, own_us = v.ev.names, v.ev.name[ev[hit]].tolist(), own[hit].tolist()
    if cause == "python":
        site_of = _frame_sites(v, ev)
        for k, code, us in zip(hit.tolist(), codes, own_us, strict=True):
            site = site_of[k]
            sites[(cause, names[code] if site is None else "python", site)] += us
        return
    for code, us, site in zip(codes, own_us, sites_for(v, ops, ev[hit]), strict=True):
        sites[(cause, names[code], site)] += us


def _frame_sites(v: RankView, frames: IntArray) -> list[str | None]:
    """Per Python frame (in start order, longer first): the innermost user frame
    (``file.py:line``) that is it or encloses it."""
    out: list[str | None] = []
    stack: list[int] = []  # the frames enclosing the current one, innermost last
    ends = v.end[frames].tolist()
    # each name's own site, looked up once per name: a trace has ~100x more frames than names
    codes = v.ev.name[frames]
    own_site = {c: user_site(v.ev.names[c]) for c in unique(codes).tolist()}
    for k, (code, t0) in enumerate(zip(codes.tolist(), v.ts[frames].tolist(), strict=True)):
        while stack and ends[stack[-1]] <= t0:
            stack.pop()
        site = own_site[code]
        out.append(site if site is not None or not stack else out[stack[-1]])
        stack.append(k)
    return out
