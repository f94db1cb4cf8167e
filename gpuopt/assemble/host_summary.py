"""Turn the recorder's result into the Profile's ``transfers``, ``syncs``, ``dispatch``,
``loops`` and ``ragged``. It reads the window's counters from the recorder's typed snapshot
(:class:`~gpuopt.probes.recorder_snapshot.RecorderSnapshot`), never the live engine.

Everything is per step (window totals divided by the steps recorded) and each site is the user's
line as ``"<path relative to cwd>:<line>"``.

How a step's time is split (per step):

``step``      = data wait + synchronize waits + op time + between-op time
``op time``   = time inside aten op calls (sync ops and copies included), measured in the window,
                corrected for the recorder's inflation of each call
``between``   = the rest: Python, framework bookkeeping, launch preparation: host overhead

Every time and share comes from the same recorded steps whose ops were counted: ``step`` is
each window step's own wall time minus the recorder's cost in that step (its handlers' own time,
measured on every call, plus the mode-entry costs of :mod:`gpuopt.probes.recorder_calibration`),
and ``data wait`` is the DataLoader probe's wait in that step (or the recorder's data-loading
ops), minus the recorder's cost of the data-loading ops. Times of other steps never enter: a run
whose step time drifts (a neighbour's load rising after the window) would otherwise turn the
difference into "host overhead". The run's step series comes from the assembly (the DataLoader
probe's waits), so :func:`summarize` is called once the run's steps are known. It reads the
user's files (sites, loops): the caller turns anything it raises into a warning.
``between_ops_share`` is ``between`` over the time that is not waiting (data, syncs, copies), the
convention ``breakdown.other`` uses. ``between`` holds two kinds of host time: issuing ops (the
Python and framework work around each op: dispatch) and stretches without any tensor op far longer
than issuing one takes (a ``time.sleep``, a blocking read, a Python loop that issues no op:
:data:`NOT_DISPATCH_FACTOR` times a calibrated trivial op call, at least
:data:`~gpuopt.probes.recorder_counters.GAP_FLOOR_S`). The recorder measures every such stretch
(``StepSnapshot.gaps``); less the step's data wait outside data-loading ops and its collective wait
(which also fall between ops), they are ``outside_ops``, named by the gap sampler's lines
(:mod:`gpuopt.probes.gap_sampler`), and never counted in ``host_dispatch_share``.
``between_ops_step_share`` is over the whole step. On one rank of several, the time the step was
blocked in collectives (the series' ``collective_s``: DDP's exposed all-reduce, an explicit call's
wait) is waiting too: it would otherwise be counted between ops (a blocked collective is no op's
time: its op returns, then the rank waits).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from statistics import median
from types import CodeType
from typing import Any

from msgspec import Struct, field

from gpuopt.assemble.stretches import Stretches, recurring, same_stretches, stretches
from gpuopt.debug import logger
from gpuopt.model.profile import (
    Dispatch,
    HandWrittenOp,
    Loop,
    OutsideSite,
    Ragged,
    StepRecord,
    Sync,
    TopSite,
    Transfer,
)
from gpuopt.probes.gap_sampler import GapSample, Stack
from gpuopt.probes.loops import LoopFinder
from gpuopt.probes.recorder import RecorderCapture
from gpuopt.probes.recorder_calibration import Calibration
from gpuopt.probes.recorder_counters import GAP_FLOOR_S, SMALL_OP_US
from gpuopt.probes.recorder_snapshot import RecorderSnapshot, SiteCounts, StepSnapshot
from gpuopt.sites import DATA, TRANSPARENT, USER, SiteResolver

log = logger(__name__)

LOOP_MIN_ITERATIONS = 2  # a loop that runs once per step is the training loop itself
LOOP_MIN_OPS = 4
TIME_NOTE = (
    "host-side times: on a GPU an op's time is its launch (kernels run asynchronously), and a "
    "sync's time includes the wait for queued GPU work; op times are corrected for the recorder's "
    "measured cost; step time, op time and waits all come from the recorded steps"
)


STEP_TIME_SOURCE = "the window's steps, recorder cost subtracted"
# A stretch without tensor ops longer than this many trivial op calls (calibrated) is no
# dispatch; the same bound as launch-bound's plausibility check (findings/rules/host_dispatch.py)
NOT_DISPATCH_FACTOR = 50.0
MAX_OUTSIDE_SITES = 5
# a user file longer than this is not scanned for hand-written op chains
MAX_SCANNED_CHARS = 500_000


def outside_bound_s(cal: Calibration) -> float:
    """The shortest stretch without tensor ops that is not dispatch (seconds)."""
    return max(NOT_DISPATCH_FACTOR * cal.op_us_without_recorder * 1e-6, GAP_FLOOR_S)


def per_step(value: float, steps: int, digits: int = 3) -> float | int:
    """A window total as a per-step figure: an int when it is one (exact planted counts)."""
    v = round(value / steps, digits) if steps else 0.0
    return int(v) if float(v).is_integer() else v


def _us(seconds: float, steps: int) -> float:
    return round(seconds * 1e6 / steps, 1) if steps else 0.0


def _share(part: float, whole: float) -> float:
    return round(min(max(part / whole, 0.0), 1.0), 4) if whole > 0 else 0.0


NEAR_STEPS = 5  # unrecorded steps nearest the window that bound its recorder-free time
NEAR_MIN = 3


def _near_bound(series: list[StepRecord], window: list[int]) -> tuple[float, float] | None:
    """``(step s, data wait s)``: medians over the measured, unrecorded steps nearest the window
    (at most :data:`NEAR_STEPS`, at least :data:`NEAR_MIN`), or None. Only ever a cap: see
    :func:`_split`."""
    skip = set(window)
    mid = (window[0] + window[-1]) / 2 if window else 0.0
    near = sorted(
        (abs(r.index - mid), float(r.time_s), _wait_s(r))
        for r in series
        if not r.warmup and r.index not in skip and r.instrumented is not True and r.time_s > 0
    )[:NEAR_STEPS]
    if len(near) < NEAR_MIN:
        return None
    return median(t for _, t, _ in near), median(w for _, _, w in near)


def _wait_s(r: StepRecord) -> float:
    return float(r.data_wait_s) if isinstance(r.data_wait_s, (int, float)) else 0.0


def _collectives(series: list[StepRecord], window: list[int]) -> list[float]:
    """Seconds each window step was blocked in collectives (0 where the series has none)."""
    by_index = {r.index: r.collective_s for r in series}
    out: list[float] = []
    for i in window:
        v = by_index.get(i)
        out.append(float(v) if isinstance(v, (int, float)) else 0.0)
    return out


def _waits(series: list[StepRecord], window: list[int]) -> list[float | None]:
    """The DataLoader probe's wait in each window step (None where the series has no step)."""
    by_index = {r.index: r.data_wait_s for r in series}
    out: list[float | None] = []
    for i in window:
        wait = by_index.get(i)
        out.append(float(wait) if isinstance(wait, (int, float)) else None)
    return out


class _Sites:
    """Positions, sites and loops for the snapshot's ``(id(code), lasti)`` keys."""

    def __init__(self, snapshot: RecorderSnapshot) -> None:
        self.resolver = snapshot.resolver
        self.codes = snapshot.codes
        self.loops = LoopFinder(snapshot.resolver)

    def code(self, cid: int) -> CodeType:
        return self.codes[cid]

    def site(self, cid: int, lasti: int) -> str:
        return self.resolver.site(self.code(cid), lasti)

    def source_line(self, code: CodeType, line: int) -> str:
        """The stripped text of a line of ``code``'s file (shown as evidence, never executed)."""
        import linecache

        text = linecache.getline(self.resolver.abspath(code.co_filename), line).strip()
        return text if len(text) <= 120 else text[:117] + "..."

    def loop_of(self, cid: int, lasti: int) -> tuple[str, int, str] | None:
        """``(relpath, loop line, loop kind)`` of the innermost loop running this instruction."""
        code = self.code(cid)
        loop = self.loops.loop_at(code, lasti)
        if loop is None:
            return None
        return self.resolver.relpath(code), loop.line, loop.kind

    def library_site(self, cid: int, lasti: int) -> str:
        """A framework's line as its package names it (``transformers/trainer.py:1914``)."""
        from gpuopt.frameworks.detect import package_path

        code = self.code(cid)
        path = package_path(self.resolver.abspath(code.co_filename))
        return f"{path}:{self.resolver.position(code, lasti)[0]}"

    def add_library(self, sync: Sync, cid: int, lasti: int) -> None:
        """A framework's read: its framework, line, function and the setting that removes it."""
        from gpuopt.frameworks.detect import FrameworkFiles, knob_for_read

        code = self.code(cid)
        filename = self.resolver.abspath(code.co_filename)
        spec = FrameworkFiles().of(filename)
        line = self.resolver.position(code, lasti)[0]
        sync.library_site = self.library_site(cid, lasti)
        sync.library_function = str(getattr(code, "co_qualname", code.co_name))
        if spec is not None:
            sync.framework = spec.name
            knob = knob_for_read(spec, filename, line)
            if knob is not None:
                sync.knob = knob.argument

    def scope_of(self, cid: int, lasti: int) -> tuple[str, str]:
        """``(path:line, kind)`` of what runs this instruction: its innermost loop's header, or
        else its function's ``def`` (the module's first line for module-level code)."""
        loop = self.loop_of(cid, lasti)
        if loop is not None:
            return f"{loop[0]}:{loop[1]}", loop[2]
        code = self.code(cid)
        kind = "module" if code.co_name == "<module>" else "function"
        return f"{self.resolver.relpath(code)}:{code.co_firstlineno}", kind


class HostSummary(Struct):
    """The Profile parts the recorder measures."""

    dispatch: Dispatch
    transfers: list[Transfer] = field(default_factory=list)
    syncs: list[Sync] = field(default_factory=list)
    loops: list[Loop] = field(default_factory=list)
    ragged: Ragged | None = None
    warnings: list[str] = field(default_factory=list)


def summarize(capture: RecorderCapture, series: list[StepRecord]) -> HostSummary:
    """The Profile parts from a stopped recorder and the run's steps."""
    warnings = list(dict.fromkeys(capture.errors))
    snap = capture.snapshot
    if not capture.enabled or snap is None:
        note = "recorder off (--window 0)" if capture.off else "recorder did not run"
        return HostSummary(
            Dispatch(window_steps=0, note=note), ragged=capture.shapes, warnings=warnings
        )
    ragged = capture.shapes
    steps = snap.steps_done
    if steps == 0 or capture.calibration is None:
        note = _no_step_note(capture)
        return HostSummary(Dispatch(window_steps=0, note=note), ragged=ragged, warnings=warnings)
    cal = capture.calibration
    first = max(capture.window_start, 0)
    if capture.from_warmup:
        warnings.append(
            f"the run ended after {capture.next_step} step(s), before the recording window: "
            f"its last warm-up step (step {first}), recorded in case, stands for it"
        )
    indices = list(range(first, first + steps))
    total = snap.total
    sites = _Sites(snap)
    waits = _waits(series, indices)
    colls = _collectives(series, indices)
    bound = _near_bound(series, indices)
    parts = _dispatch(snap, cal, (waits, colls), bound, first)
    dispatch, wall, scale = parts.dispatch, parts.wall, parts.scale
    dispatch.top_sites = _top_sites(total, sites, steps, wall, cal, scale)
    try:
        hand_written = hand_written_ops(total, sites, steps, wall, (cal, scale))
    except Exception as exc:  # the scan reads the user's files: it never costs the summary
        log.debug("hand-written op chains not scanned", exc_info=True)
        warnings.append(f"hand-written op chains not scanned: {type(exc).__name__}: {exc}")
        hand_written = []
    if hand_written:
        dispatch.hand_written_ops = hand_written
    dispatch.outside_ops_sites = _outside_sites(
        (capture.gap_samples, capture.gap_codes),
        sites,
        dispatch,
        outside_bound_s(cal),
        stretches(snap.steps),
    )
    if ragged is not None:
        ragged.step_signatures_distinct = len({c.signature for c in snap.steps})
        ragged.step_signatures_steps = len(snap.steps)
    each = list(zip(snap.steps, parts.walls, parts.scales, strict=True))
    transfers = _transfers(total, sites, steps, wall)
    _per_step(transfers, [_transfers(c, sites, 1, w) for c, w, _ in each], _transfer_key)
    syncs = _syncs(total, sites, steps, wall)
    _per_step(syncs, [_syncs(c, sites, 1, w) for c, w, _ in each], _sync_key)
    loops = _loops(total, sites, steps, wall, cal, scale)
    _per_step(loops, [_loops(c, sites, 1, w, cal, k) for c, w, k in each], _loop_key)
    return HostSummary(
        dispatch=dispatch,
        transfers=transfers,
        syncs=syncs,
        loops=loops,
        ragged=ragged,
        warnings=warnings,
    )


def _transfer_key(e: Transfer) -> tuple[object, ...]:
    return (e.direction, e.site, e.pinned, e.non_blocking)


def _sync_key(e: Sync) -> tuple[object, ...]:
    return (e.kind, e.site, e.measured_device)


def _loop_key(e: Loop) -> tuple[object, ...]:
    return (e.site,)


def _per_step(window: Sequence[Any], steps: list[Sequence[Any]], key: Any) -> None:
    """Give each window entry the shares of each recorded step (``time_share_steps``, and
    ``idle_after_share_steps`` for syncs): 0 in a step where its site did not qualify."""
    by_step = [{key(e): e for e in entries} for entries in steps]
    for entry in window:
        mine = [found.get(key(entry)) for found in by_step]
        entry.time_share_steps = [
            float(e.time_share) if e is not None and isinstance(e.time_share, float) else 0.0
            for e in mine
        ]
        if isinstance(entry, Sync):
            entry.idle_after_share_steps = [
                float(e.idle_after_share)
                if e is not None and isinstance(e.idle_after_share, float)
                else 0.0
                for e in mine
            ]


def _no_step_note(capture: RecorderCapture) -> str:
    """Why nothing is reported per step: the run never finished a step inside the window."""
    done, start = capture.next_step, capture.window_start
    hint = f"; rerun with --warmup {done - 1}" if 0 < done <= start else ""
    ran = (
        " (what ran after the last step boundary is not a training step)"
        if capture.unfinished
        else ""
    )
    return (
        f"too few steps to record a step: the run ended after {done} step(s), before the "
        f"recording window (step {start}) saw a complete step{ran}{hint}"
    )


class StepSplit(Struct, frozen=True):
    """Where one recorded step's time went (seconds, the recorder's cost removed)."""

    overhead: float  # the recorder's cost in the step
    capped: bool  # the step's time was capped at its unrecorded neighbours'
    wall: float  # the step's time
    op_time: float  # inside aten op calls
    small_time: float  # of it, in ops shorter than SMALL_OP_US
    h2d: float  # in host-to-device copies
    data: float  # data wait
    sync_calls: float  # in synchronize calls
    coll: float  # blocked in collectives
    between: float  # between ops, not waiting
    outside: float  # of it, stretches without ops longer than dispatch takes
    not_waiting: float  # the step less its waits (data, syncs, copies, collectives)
    host: float  # op time and time between ops


def _split(
    t: StepSnapshot,
    cal: Calibration,
    wait: float | None,
    bound: tuple[float, float] | None,
    coll: float = 0.0,
) -> StepSplit:
    """Where the time of one recorded step ``t`` went, from that step, the recorder's cost
    removed. ``wait``: the DataLoader probe's wait in that step. ``bound``: step time and data
    wait of the unrecorded steps nearest the window: the recorder slows a step by more than its
    per-call model accounts for (colder caches, larger ops' arguments), and a recorder-free step
    cannot have been slower than its unrecorded neighbours, so the step's time is capped there,
    and its data wait taken from the same neighbours; the host time left is split as below, so
    the split adds up to the step. The cap only ever lowers the
    step's time: a run that slows down later (a neighbour's load rising) changes nothing, and
    one that speeds up can only under-report host time. ``coll``: the step's time blocked in
    collectives, waiting like the data wait: it comes out of the time between ops (a blocked
    collective is no op's time), at most all of it. In the window a rank also waits for the
    recorder's cost on the other ranks, which its own cost model cannot remove: the op time,
    measured op by op, stands, and the collective time is what is left of the step."""
    inflation = cal.inflation_us * 1e-6
    op_time = max(t.op_s - t.ops * inflation, 0.0)
    sync_calls = sum(v.seconds for k, v in t.syncs.items() if k.kind == "synchronize")
    h2d = sum(v.seconds for k, v in t.transfers.items() if k.direction == "h2d")
    overhead = _overhead(t, cal)
    per_op, _ = _per_event(t, cal)
    own = max(t.wall_s - overhead, 1e-9)
    data_cost = t.data_ops * per_op
    data = max(t.data_s - data_cost, 0.0)
    if wait is not None:
        data = max(data, wait - data_cost)
    wall = own
    # a cost model that took away more than the time outside the ops and syncs took time the
    # step spent in them (a calibration the machine disturbed reads the dispatch entry several
    # times too dear, and the step comes out at 0 µs): no recorder-free step was measured, and
    # the neighbours, where there are some, say what it was
    short = own < max(op_time + sync_calls, 1e-9)
    capped = bound is not None and (own > bound[0] or short)
    if bound is not None and capped:
        # capped: step time and data wait both from the unrecorded neighbours (the recorder slows
        # the data loading too), the host time in between split as the recorded step split it
        wall, data = bound[0], bound[1]
    elif short:
        wall = max(op_time + sync_calls, 1e-9)  # at least its ops' and syncs' measured time
    data = min(data, wall)
    # The host time outside the waits is split into op time and the rest (between ops). A
    # capped step's excess is recorder cost the per-call model missed: it comes out of the time
    # between ops first (never inventing dispatch overhead), then out of the op time, so the
    # split always adds up to the step.
    busy = max(wall - data - sync_calls, 0.0)
    op_time = min(op_time, busy)
    coll = min(max(coll, 0.0), busy - op_time)
    between = busy - op_time - coll
    # stretches without ops longer than dispatch takes, less the waits that also fall between
    # ops: the data wait outside data-loading ops, the collectives'
    bound_s = outside_bound_s(cal)
    long_gaps = sum(g for g in t.gaps.values() if g >= bound_s)
    data_between = max(data - max(t.data_s - data_cost, 0.0), 0.0)
    outside = min(max(long_gaps - data_between - coll, 0.0), between)
    return StepSplit(
        overhead=overhead,
        capped=capped,
        wall=wall,
        op_time=op_time,
        small_time=min(max(t.small_s - t.small_ops * inflation, 0.0), op_time),
        h2d=h2d,
        data=data,
        sync_calls=sync_calls,
        coll=coll,
        between=between,
        outside=outside,
        not_waiting=max(wall - data - t.sync_s - h2d - coll, op_time + between, 1e-9),
        host=op_time + between,
    )


def _site_time(st: SiteCounts, per_op: float, per_call: float) -> float:
    """A line's host time (its ops and the time before each), its recorder cost estimate out."""
    return max(float(st.time_s - st.ops * per_op - st.torch_function_calls * per_call), 0.0)


def _site_scale(t: StepSnapshot, cal: Calibration, host: float) -> float:
    """The factor that makes the lines' host times add up to at most ``host``, the host time
    the step's split left between its waits (:func:`_split`). Where the recorder cost more
    than its per-call model says, what the model missed stays in the lines' times, and the cap
    of :func:`_split` takes it out of the step but not out of them: unscaled, the lines could
    add up to more than the step. Scaled, each line keeps its part of the step; where the model
    covered the cost the lines add up to the step and nothing changes (measured on
    examples/ragged_steps.py: CHANGELOG.md)."""
    per_op, per_call = _per_event(t, cal)
    lines = sum(_site_time(st, per_op, per_call) for st in t.sites.values() if not st.data)
    return min(1.0, host / lines) if lines > 0 else 1.0


def _overhead(t: StepSnapshot, cal: Calibration) -> float:
    """Seconds the recorder added to ``t``: its handlers' own time (measured on every call; it
    includes the first-sight classification) plus the price of entering the modes (calibrated)."""
    entries = (
        t.tf_events * cal.function_entry_us
        + t.dispatch_events * cal.dispatch_entry_us
        + t.pass_events * cal.passthrough_us
    ) * 1e-6
    return t.own_tf_s + t.own_dispatch_s + entries


def _per_event(t: StepSnapshot, cal: Calibration) -> tuple[float, float]:
    """Mean recorder seconds per recorded op and per recorded Python call, for per-site times."""
    per_op = t.own_dispatch_s / max(t.dispatch_events, 1) + cal.dispatch_entry_us * 1e-6
    per_call = t.own_tf_s / max(t.tf_events, 1) + cal.function_entry_us * 1e-6
    return per_op, per_call


class DispatchParts(Struct, frozen=True):
    """The ``dispatch`` record and what the other parts of the summary share with it."""

    dispatch: Dispatch
    wall: float  # the window's step time (seconds, all its steps): the other shares' whole
    scale: float  # the factor that scales the lines' host times into the window's
    scales: list[float]  # and into each recorded step's (:func:`_site_scale`)
    walls: list[float]  # each recorded step's time


def _dispatch(
    snap: RecorderSnapshot,
    cal: Calibration,
    waiting: tuple[list[float | None], list[float]],
    bound: tuple[float, float] | None,
    window_start: int,
) -> DispatchParts:
    """The ``dispatch`` record and its parts, from the recorded steps (``waiting``: the
    DataLoader probe's wait in each of them, and the time each was blocked in collectives;
    ``bound``: the cap of :func:`_split`)."""
    t, steps = snap.total, snap.steps_done
    waits, colls = waiting
    per = [
        _split(
            c,
            cal,
            waits[i] if i < len(waits) else None,
            bound,
            colls[i] if i < len(colls) else 0.0,
        )
        for i, c in enumerate(snap.steps)
    ]
    capped = sum(p.capped for p in per)
    # Shares are medians over the window's steps: one step slowed by the machine (a preempted
    # op, the recorder's first sight of the code) does not decide them. Times per step are means.
    between_share = median([_share(p.between, p.not_waiting) for p in per]) if per else 0.0
    host_steps = [_share(p.between - p.outside + p.small_time, p.wall) for p in per]
    host_share = median(host_steps) if per else 0.0
    outside = sum(p.outside for p in per)
    wall = sum(p.wall for p in per)
    op_time = sum(p.op_time for p in per)
    h2d_time = sum(p.h2d for p in per)
    data_wait = sum(p.data for p in per)
    sync_calls = sum(p.sync_calls for p in per)
    overhead = sum(p.overhead for p in per)
    coll = sum(p.coll for p in per)
    # the window's split adds up
    between = max(wall - data_wait - sync_calls - coll - op_time, 0.0)
    out = Dispatch(
        ops_per_step=per_step(t.ops, steps, 1),
        mean_op_us=round(op_time / t.ops * 1e6, 2) if t.ops else None,
        mean_op_us_raw=round(t.op_s / t.ops * 1e6, 2) if t.ops else None,
        between_ops_share=round(between_share, 4),
        between_ops_step_share=_share(between, wall),
        op_time_share=_share(op_time, wall),
        host_dispatch_share=round(host_share, 4),
        tiny_ops_per_step=per_step(t.small_ops, steps, 1),
        tiny_op_us=SMALL_OP_US,
        view_ops_per_step=per_step(t.view_ops, steps, 1),
        data_ops_per_step=per_step(t.data_ops, steps, 1),
        torch_function_calls_per_step=per_step(t.tf_events, steps, 1),
        step_time_us=round(wall / steps * 1e6, 1),
        step_time_source=STEP_TIME_SOURCE
        + (", at most the unrecorded steps nearest the window" if bound is not None else ""),
        step_time_capped_steps=capped,
        step_time_us_raw=round(t.wall_s / steps * 1e6, 1),
        between_ops_us_per_step=_us(between, steps),
        op_time_us_per_step=_us(op_time, steps),
        data_wait_us_per_step=_us(data_wait, steps),
        data_wait_source="dataloader probe and recorder, the window's steps, recorder cost "
        "subtracted",
        sync_us_per_step=_us(t.sync_s, steps),
        sync_share=_share(t.sync_s, wall),
        h2d_us_per_step=_us(h2d_time, steps),
        h2d_share=_share(h2d_time, wall),
        window_start=window_start,
        window_steps=steps,
        window_partial=False,
        measured_device="cpu" if snap.cpu_only else "accelerator",
        recorder_overhead_us_per_op=round(overhead / max(t.dispatch_events, 1) * 1e6, 2),
        recorder_own_us_per_op=round(
            (t.own_tf_s + t.own_dispatch_s) / max(t.dispatch_events, 1) * 1e6, 2
        ),
        recorder_function_entry_us=round(cal.function_entry_us, 2),
        recorder_dispatch_entry_us=round(cal.dispatch_entry_us, 2),
        recorder_passthrough_us=round(cal.passthrough_us, 2),
        recorder_inflation_us=round(cal.inflation_us, 2),
        recorder_trivial_op_us=round(cal.trivial_op_us, 2),
        recorder_overhead_share=_share(overhead, t.wall_s),
        calibrated_op_us=round(cal.op_us_without_recorder, 2),
        note=TIME_NOTE,
        host_dispatch_share_steps=host_steps,
        op_time_share_steps=[_share(p.op_time, p.wall) for p in per],
        outside_ops_us_per_step=_us(outside, steps),
        outside_ops_share=_share(outside, wall),
        outside_ops_min_us=round(outside_bound_s(cal) * 1e6, 1),
        outside_ops_share_steps=[_share(p.outside, p.wall) for p in per],
    )
    if coll > 0 or any(c > 0 for c in colls):
        # the window saw collectives: said even where the split left none of their wait (ops
        # measured as the whole step on a loaded machine), so the key does not come and go
        out.collective_us_per_step = _us(coll, steps)
    return DispatchParts(
        dispatch=out,
        wall=wall,
        scale=_site_scale(t, cal, op_time + between),
        scales=[_site_scale(c, cal, p.host) for c, p in zip(snap.steps, per, strict=True)],
        walls=[p.wall for p in per],
    )


def _transfers(t: StepSnapshot, sites: _Sites, steps: int, wall: float) -> list[Transfer]:
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for k, v in t.transfers.items():
        site = sites.site(k.code, k.lasti)
        g = groups.setdefault(
            (k.direction, site, k.pinned, k.non_blocking),
            {
                "direction": k.direction,
                "site": site,
                "count": 0,
                "bytes": 0,
                "time": 0.0,
                "pinned": k.pinned,
                "non_blocking": k.non_blocking,
                "src": set(),
                "dst": set(),
                "api": set(),
            },
        )
        g["count"] += v.count
        g["bytes"] += v.bytes
        g["time"] += v.seconds
        g["src"].add(k.src)
        g["dst"].add(k.dst)
        g["api"].add(k.api)
    out = [
        Transfer(
            direction=g["direction"],
            site=g["site"],
            count_per_step=per_step(g["count"], steps),
            bytes_per_step=per_step(g["bytes"], steps, 0),
            pinned=g["pinned"],
            non_blocking=g["non_blocking"],
            src_device=",".join(sorted(g["src"])),
            dst_device=",".join(sorted(g["dst"])),
            api=",".join(sorted(g["api"])),
            time_us_per_step=_us(g["time"], steps),
            time_share=_share(g["time"] / steps, wall / steps),
        )
        for g in groups.values()
    ]
    out.sort(key=lambda e: (-e.bytes_per_step, e.site or ""))
    return out


def _syncs(t: StepSnapshot, sites: _Sites, steps: int, wall: float) -> list[Sync]:
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for k, v in t.syncs.items():
        site = sites.site(k.code, k.lasti)
        measured = "cpu" if k.device == "cpu" else k.device
        lib_site = sites.library_site(*k.lib) if k.lib is not None else None
        g = groups.setdefault(
            (k.kind, site, measured, lib_site),
            {
                "kind": k.kind,
                "site": site,
                "count": 0,
                "time": 0.0,
                "idle": 0.0,
                "measured": measured,
                "api": set(),
                "op": set(),
                "scope": sites.scope_of(k.code, k.lasti),
                "lib": k.lib,
            },
        )
        g["count"] += v.count
        g["time"] += v.seconds
        g["idle"] += v.idle_s
        g["api"].add(k.api)
        g["op"].add(k.op)
    out = [_sync(g, sites, steps, wall) for g in groups.values()]
    out.sort(key=lambda e: (-e.count_per_step, e.site or "", e.kind))
    return out


def _sync(g: dict[str, Any], sites: _Sites, steps: int, wall: float) -> Sync:
    s = Sync(
        kind=g["kind"],
        site=g["site"],
        count_per_step=per_step(g["count"], steps),
        api=",".join(sorted(g["api"])),
        op=",".join(sorted(g["op"])),
        measured_device=g["measured"],
        # Seen on a CPU-only run, where it cost nothing: it would block on a GPU (inferred).
        # Entries measured on a device did block.
        would_block_on_gpu=g["measured"] == "cpu",
        time_us_per_step=_us(g["time"], steps),
        idle_after_us_per_step=_us(g["idle"], steps),
        time_share=_share(g["time"], wall),
        idle_after_share=_share(g["idle"], wall),
        scope=g["scope"][0],
        scope_kind=g["scope"][1],
    )
    if g["lib"] is not None:
        sites.add_library(s, *g["lib"])
    return s


def _loops(
    t: StepSnapshot,
    sites: _Sites,
    steps: int,
    wall: float,
    cal: Calibration,
    site_scale: float = 1.0,
) -> list[Loop]:
    per_loop: dict[tuple[str, int], dict[str, Any]] = defaultdict(
        lambda: {"ops": 0, "index": 0, "time": 0.0, "iters": 0, "kind": ""}
    )
    per_op, per_call = _per_event(t, cal)

    def add(at: tuple[int, int], st: SiteCounts, iterations: int) -> dict[str, Any] | None:
        """Count ``st`` in the loop running instruction ``at``, if one does."""
        found = sites.loop_of(*at)
        if found is None:
            return None
        rel, line, kind = found
        g = per_loop[(rel, line)]
        g["kind"] = kind
        if not g.get("code"):
            g["code"] = sites.source_line(sites.code(at[0]), line)
        g["ops"] += st.ops
        g["index"] += st.index_ops
        g["time"] += _site_time(st, per_op, per_call) * site_scale
        g["iters"] = max(g["iters"], iterations)
        return g

    # A loop qualifies only through an instruction that ran at least LOOP_MIN_ITERATIONS times
    # per step: files without one are not parsed at all.
    repeated = {
        sites.code(cid).co_filename
        for (cid, _), st in t.sites.items()
        if not st.data and st.executions >= LOOP_MIN_ITERATIONS * steps
    }
    for key, st in t.sites.items():
        if not st.data and sites.code(key[0]).co_filename in repeated:
            add(key, st, st.executions)
    # Ops issued in user helpers that a loop calls: counted in the caller's loop when that line
    # made at least LOOP_MIN_ITERATIONS calls per step (a training loop calling forward() once
    # per step does not qualify); each call is one iteration. (Data-loading ops have no caller.)
    for (own, caller), st in t.via.items():
        calls = t.via_calls.get(caller, 0)
        if calls >= LOOP_MIN_ITERATIONS * steps:
            g = add(caller, st, calls)
            if g is not None:
                g.setdefault("through", set()).add(sites.site(*own))
    ranked: list[tuple[tuple[float, float, str], Loop]] = []
    for (rel, line), g in per_loop.items():
        iterations = g["iters"] / steps
        ops = g["ops"] / steps
        if iterations < LOOP_MIN_ITERATIONS or ops < LOOP_MIN_OPS:
            continue
        site, share, ops_per_step = (
            f"{rel}:{line}",
            _share(g["time"], wall),
            per_step(g["ops"], steps, 2),
        )
        loop = Loop(
            site=site,
            kind=g["kind"],
            code=g.get("code", ""),
            ops_per_step=ops_per_step,
            iterations_per_step=per_step(g["iters"], steps, 2),
            indexing_ops_per_step=per_step(g["index"], steps, 2),
            ops_per_iteration=round(g["ops"] / g["iters"], 2) if g["iters"] else None,
            time_us_per_step=_us(g["time"], steps),
            time_share=share,
        )
        if g.get("through"):
            loop.through = sorted(g["through"])  # the helper lines that issued its ops
        ranked.append(((-share, -ops_per_step, site), loop))
    ranked.sort(key=lambda kv: kv[0])
    return [loop for _, loop in ranked]


def _top_sites(
    t: StepSnapshot,
    sites: _Sites,
    steps: int,
    wall: float,
    cal: Calibration,
    site_scale: float = 1.0,
) -> list[TopSite]:
    """The user lines that issue the most op time per step (op time + the host time before it)."""
    per_op, per_call = _per_event(t, cal)
    agg: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for (cid, lasti), st in t.sites.items():
        if st.data or not st.ops:
            continue
        a = agg[sites.site(cid, lasti)]
        a[0] += st.ops
        a[1] += _site_time(st, per_op, per_call) * site_scale
    ranked = sorted(agg.items(), key=lambda kv: (-kv[1][1], kv[0]))[:5]
    return [
        TopSite(site=site, ops_per_step=per_step(ops, steps, 1), time_share=_share(secs, wall))
        for site, (ops, secs) in ranked
    ]


def _line_ops(
    t: StepSnapshot, sites: _Sites, cal: Calibration, site_scale: float
) -> dict[tuple[str, str], dict[int, list[float]]]:
    """``{(file's path, as shown): {line: [ops, host seconds]}}`` over the user lines with ops."""
    per_op, per_call = _per_event(t, cal)
    out: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(dict)
    for (cid, lasti), st in t.sites.items():
        if st.data or not st.ops:
            continue
        code = sites.code(cid)
        key = (sites.resolver.abspath(code.co_filename), sites.resolver.relpath(code))
        line = sites.resolver.position(code, lasti)[0]
        if line is None:  # an instruction without a line (Python 3.11+ can have them)
            continue
        a = out[key].setdefault(line, [0, 0.0])
        a[0] += st.ops
        a[1] += _site_time(st, per_op, per_call) * site_scale
    return out


def hand_written_ops(
    t: StepSnapshot,
    sites: _Sites,
    steps: int,
    wall: float,
    scaling: tuple[Calibration, float],
) -> list[HandWrittenOp]:
    """The hand-written op chains (a GELU, softmax, layer norm or attention written as several
    ops: :mod:`gpuopt.fixes.fused_ops`) on the user lines that issued ops in the
    window, with those lines' ops and time; a file that cannot be read or parsed is skipped."""
    out: list[HandWrittenOp] = []
    for (path, shown), lines in _line_ops(t, sites, *scaling).items():
        found = _chains_in(path, shown, lines)
        for m in found:
            here = [v for ln, v in lines.items() if m.line <= ln <= m.end_line]
            if not here:
                continue
            ops, secs = sum(v[0] for v in here), sum(v[1] for v in here)
            out.append(
                HandWrittenOp(
                    site=f"{shown}:{m.line}",
                    kind=m.kind,
                    code=m.code if len(m.code) <= 200 else m.code[:199] + "…",
                    replacement=m.replacement,
                    ops_per_step=per_step(ops, steps, 1),
                    time_share=_share(secs, wall),
                )
            )
    return sorted(out, key=lambda h: (-h.time_share, h.site))


def _chains_in(path: str, shown: str, lines: Mapping[int, Any]) -> list[Any]:
    """The hand-written op chains of one file on ``lines``; none for a file too long, unread or
    unparsed. libcst (0.35 s to import) is loaded only when a line holds a trigger word."""
    from gpuopt.hand_written_trigger import trigger_lines

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_SCANNED_CHARS + 1)
    except (OSError, UnicodeDecodeError) as exc:
        log.debug("hand-written ops of %s not read: %s", shown, exc)
        return []
    if len(text) > MAX_SCANNED_CHARS:
        return []  # Python's own parse of it would cost the run's end a second
    if not trigger_lines(text.splitlines(), lines):
        return []
    from gpuopt.source import CodemodError
    from gpuopt.source.hand_written import find_hand_written_ops_at

    try:
        return find_hand_written_ops_at(text, lines, shown)
    except CodemodError as exc:
        log.debug("hand-written ops of %s not read: %s", shown, exc)
        return []


def _frame_label(resolver: SiteResolver, code: CodeType, lasti: int) -> str:
    """``json/decoder.py:353 (JSONDecoder.raw_decode)``: a frame outside the user's code; a
    frozen module's as Python names it (``<frozen importlib._bootstrap_external>:147``), never
    as a file of the working directory; a framework's from its package's folder
    (``accelerate/optimizer.py``)."""
    import os

    from gpuopt.frameworks.detect import FrameworkFiles, package_path

    name = getattr(code, "co_qualname", code.co_name)
    line = resolver.position(code, lasti)[0]
    if code.co_filename.startswith("<"):
        return f"{code.co_filename}:{line} ({name})"
    path = resolver.abspath(code.co_filename)
    if FrameworkFiles().of(path) is not None:
        short = package_path(path)
    else:
        short = os.path.join(*path.split(os.sep)[-2:]) if os.sep in path else path
    return f"{short}:{line} ({name})"


def _sample_site(
    resolver: SiteResolver, sample: GapSample, codes: dict[int, CodeType]
) -> tuple[str, str] | None:
    """``(user site, innermost frame)`` of a sample; None for data loading (its wait is data
    wait), gpuopt's own code, or a stack with no user frame. Where a framework's code lies
    between (the HF Trainer, accelerate), the frame named is the framework's innermost, with
    the frame it was running after it (``accelerate/optimizer.py:172 (AcceleratedOptimizer.step)
    → <frozen importlib._bootstrap_external>:147 (_path_stat)``)."""
    stack = [(codes[cid], lasti) for cid, lasti in sample.stack if cid in codes]
    if not stack:
        return None
    cats = [resolver.classify(code) for code, _ in stack]
    if DATA in cats or cats[0] == TRANSPARENT:
        return None
    for i, ((code, lasti), cat) in enumerate(zip(stack, cats, strict=True)):
        if cat == USER:
            site = resolver.site(code, lasti)
            if cats[0] == USER:
                return site, site
            frame = _frame_label(resolver, *stack[0])
            fw = _framework_frame(stack[:i])
            if fw is not None and fw != stack[0]:
                frame = f"{_frame_label(resolver, *fw)} → {frame}"
            return site, frame
    return None


def _framework_frame(stack: list[tuple[CodeType, int]]) -> tuple[CodeType, int] | None:
    """The innermost frame of a framework's code in ``stack`` (innermost first)."""
    from gpuopt.frameworks.detect import FrameworkFiles

    files = FrameworkFiles()
    return next((f for f in stack if files.of(f[0].co_filename) is not None), None)


def _stretch_scale(samples: list[GapSample], lengths: dict[float, float]) -> dict[float, float]:
    """For each stretch the samples looked into whose length the recorder measured (``lengths``,
    by when it began), the factor that brings its samples' seconds up to that length: samples
    every millisecond miss the stretch's start and the tail after the last look, so a stretch of
    a few milliseconds would be named for a fraction of it. Never below 1."""
    seen: dict[float, float] = defaultdict(float)
    for sample in samples:
        if sample.since in lengths:
            seen[sample.since] += max(sample.seconds, 0.0)
    return {k: max(lengths[k] / v, 1.0) for k, v in seen.items() if v > 0}


def _named_outside(
    sampled: tuple[list[GapSample], dict[int, CodeType]],
    sites: _Sites,
    bound_s: float,
    found: Stretches,
    per_step: dict[int, float],
) -> dict[tuple[str, str], list[float]]:
    """The seconds (and sample counts) by (user line, frame) of the stretches without ops the
    samples looked into, those shorter than ``bound_s`` left out: real time in which the
    training thread ran no op and no recorder code, so no share of the recorder's cost is in it.
    A stretch whose length the recorder measured (``found``: :attr:`StepSnapshot.gaps`)
    counts for all of it, shared among its samples' lines; another, for its samples' own time;
    and the same stretch in the steps where no sample looked into it, for its length
    (:func:`~gpuopt.assemble.stretches.same_stretches`). ``per_step`` gets the seconds of the
    stretches that recur, by window step (:func:`~gpuopt.assemble.stretches.recurring`: a
    stall at its own place in each step is the machine, not the code; ``gpuopt check`` reads
    these steps)."""
    samples, codes = sampled
    lengths = found.lengths
    recurs = recurring(found, bound_s)
    scale = _stretch_scale(samples, lengths)
    by: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    named: dict[float, tuple[str, str]] = {}  # each stretch a sample named, by its start
    where_of: dict[Stack, tuple[str, str] | None] = {}  # each distinct stack resolved once
    for sample in samples:
        if sample.seconds <= 0 or lengths.get(sample.since, sample.age) < bound_s:
            continue  # nothing, or a stretch short enough to be dispatch
        if sample.stack not in where_of:
            where_of[sample.stack] = _sample_site(sites.resolver, sample, codes)
        where = where_of[sample.stack]
        if where is not None:
            secs = sample.seconds * scale.get(sample.since, 1.0)
            entry = by[where]
            entry[0] += secs
            entry[1] += 1
            named.setdefault(sample.since, where)
            if sample.since not in lengths or sample.since in recurs:
                per_step[sample.step] = per_step.get(sample.step, 0.0) + secs
    for where, step, secs, start in same_stretches(found, named, bound_s):
        by[where][0] += secs
        if start in recurs:
            per_step[step] = per_step.get(step, 0.0) + secs
    return by


def _outside_sites(
    sampled: tuple[list[GapSample], dict[int, CodeType]],
    sites: _Sites,
    dispatch: Dispatch,
    bound_s: float,
    found: Stretches,
) -> list[OutsideSite]:
    """The lines the window's time outside tensor ops went to, as the samples saw it (samples in
    stretches shorter than ``bound_s`` left out). Each line's time is that of the stretches its
    samples looked into (:func:`_named_outside`; ``found``: the recorder's measured stretches):
    a stretch the sampler could not look into (the process descheduled by a busy machine holds
    the GIL) stays unnamed; the lines' sum is at most the measured time, or, where the cap on the
    window's steps left none of it, the named stretches' own time.
    ``dispatch.outside_ops_named_us_per_step`` gets the named time, uncapped: where the
    recorder's cap on a step of tiny ops took the time between ops, a stretch without ops can
    leave nothing of the measured time and be named only there (``gpuopt check``'s outside-ops
    gate reads it)."""
    steps = int(dispatch.window_steps or 0)
    if steps <= 0:
        return []
    per_step: dict[int, float] = {}
    by = _named_outside(sampled, sites, bound_s, found, per_step) if sampled[0] else {}
    seen_us = sum(secs for secs, _ in by.values()) * 1e6 / steps
    dispatch.outside_ops_named_us_per_step = round(seen_us, 1)
    dispatch.outside_ops_named_us_steps = [
        round(per_step.get(i, 0.0) * 1e6, 1) for i in range(steps)
    ]
    outside_us = float(dispatch.outside_ops_us_per_step or 0.0)
    step_us = float(dispatch.step_time_us or 0.0)
    if seen_us <= 0:
        return []
    # scaled to the measured time, except where the cap left none of it: then the samples' own
    scale = min(1.0, outside_us / seen_us) if outside_us > 0 else 1.0
    # A share is of a step at least as long as the time named in it: a one-off wait of seconds
    # in a window of sub-millisecond steps, left whole by the cap, stays at most the whole step
    share_of_us = max(step_us, seen_us * scale)
    ranked = sorted(by.items(), key=lambda kv: (-kv[1][0], kv[0]))[:MAX_OUTSIDE_SITES]
    out = []
    for (site, frame), (secs, n) in ranked:
        us = secs * 1e6 / steps * scale
        out.append(
            OutsideSite(
                site=site,
                frame=frame,
                time_us_per_step=round(us, 1),
                time_share=round(us / share_of_us, 4) if share_of_us > 0 else 0.0,
                samples=int(n),
            )
        )
    return out
