"""Build the Profile of a ``gpuopt profile`` run from its :class:`RunRecord` (pure: no I/O but
reading the analysed trace files a GPU run's profiler window wrote).

Per step: a step ends at each optimizer (or ``gpuopt.step()``, or without an optimizer
``loss.backward()``) mark; step 0 starts at the run's
first ``next()`` on a DataLoader when that comes before the first mark. Statistics cover the
measured steps: after warm-up, and outside the recorder's window (which slows the steps it
records) whenever other steps remain.
"""

from __future__ import annotations

from pathlib import Path

from msgspec import UNSET, Struct, UnsetType, field

from gpuopt.assemble import step_stats
from gpuopt.assemble.distributed_run import distributed_record, step_collective_s
from gpuopt.assemble.framework_run import framework_record
from gpuopt.assemble.host_summary import summarize
from gpuopt.assemble.overhead import overhead_record
from gpuopt.assemble.run_record import RunRecord
from gpuopt.compile.events import CompileCapture
from gpuopt.compile.summary import compile_record
from gpuopt.debug import logger
from gpuopt.errors import GpuoptError
from gpuopt.model.document import empty_profile
from gpuopt.model.profile import Breakdown, Dispatch, Overhead, Profile, Steps
from gpuopt.model.records import Framework, given
from gpuopt.model.trace import TraceDetails
from gpuopt.probes.recorder import RecorderCapture

log = logger(__name__)


class _StepTimeline(Struct):
    steps: Steps
    times: list[float]
    measured: list[int]
    warnings: list[str] = field(default_factory=list)


def assemble_run(rec: RunRecord) -> Profile:
    """The run's Profile, findings not yet evaluated (``gpuopt.findings.engine.evaluate``)."""
    p = empty_profile(rec.script, rec.argv)
    p.cwd, p.started_at, p.rank = rec.cwd, rec.started_at, rec.rank
    p.status, p.exit_code = rec.outcome.status, rec.outcome.exit_code
    if rec.outcome.error is not None:
        p.error = rec.outcome.error
    p.stopped_by_steps = rec.outcome.stopped_by_steps
    p.wall_s = rec.t_end - rec.t_start
    p.environment = rec.environment
    timeline = _step_timeline(rec)
    p.steps = timeline.steps
    if rec.loaders is not None:
        p.dataloaders = rec.loaders.infos(timeline.measured)
    if rec.training is not None:
        p.training = rec.training
    if rec.fixes_applied:
        p.fixes_applied = list(rec.fixes_applied)
    if rec.collectives is not None:
        p.distributed = distributed_record(rec.collectives, timeline.measured)
    p.memory = rec.memory
    reported: list[str] = []
    if rec.utilization is not None:
        p.utilization = rec.utilization
    if rec.sampler_error:
        reported.append(rec.sampler_error)
    if rec.recorder is not None:
        reported += _add_host_summary(p, rec.recorder)
        if rec.training is None and not isinstance(p.ragged, UnsetType):
            p.ragged.samples = UNSET  # kept for the runs that record their training only
        _loader_roles(p)
    if rec.window is not None:
        reported += rec.window.errors
        if rec.window.trace_file is not None:
            p.trace_files = [str(rec.window.trace_file)]
        if rec.window.info is not None:
            p.trace = TraceDetails(profiler_window=rec.window.info)
    p.breakdown = _breakdown(rec, timeline, p.dispatch)
    p.overhead = _overhead(rec, timeline)
    p.compile = None  # the key is always there: null where nothing was compiled
    p.framework = _framework(rec, p, reported)
    if rec.compile is not None:
        reported += _add_compile(p, rec, timeline.measured)
    p.warnings = list(dict.fromkeys(reported)) + rec.warnings + timeline.warnings
    if rec.window is not None:
        # after the run's warnings: the trace adds warnings of its own to the profile
        unread = attach_window_traces(p)
        p.warnings.extend(unread)
    return p


def _overhead(rec: RunRecord, timeline: _StepTimeline) -> Overhead | UnsetType:
    """gpuopt's own costs; unset where the session measured none (a record built elsewhere)."""
    if rec.spent is None:
        return UNSET
    usual = timeline.steps.time_s.median
    return overhead_record(rec.spent, timeline.times, rec.instrumented, usual)


def _framework(rec: RunRecord, p: Profile, reported: list[str]) -> Framework | None:
    """The ``framework`` key (None for a plain loop); a summary that fails costs its key."""
    try:
        return framework_record(rec, p)
    except Exception as exc:
        log.debug("the framework's summary failed", exc_info=True)
        reported.append(f"the framework could not be summarised: {type(exc).__name__}: {exc}")
        return None


def _add_compile(p: Profile, rec: RunRecord, measured: list[int]) -> list[str]:
    """The ``compile`` key (None where nothing was compiled); the compile probe's warnings."""
    cap = rec.compile
    assert cap is not None
    notes = [f"probe compile: {e}" for e in cap.errors]
    try:
        p.compile = compile_record(cap, len(rec.step_ends), measured, rec.t_end - rec.t_start)
    except Exception as exc:  # a summary that fails costs the compile key, never the profile
        log.debug("probe compile: its summary failed", exc_info=True)
        return [*notes, f"probe compile could not report: {type(exc).__name__}: {exc}"]
    if p.compile is None and cap.calls:
        notes.append(_nothing_compiled(cap))
    return notes


def _nothing_compiled(cap: CompileCapture) -> str:
    """Why a run that called torch.compile compiled nothing, as far as the calls say."""
    sites = ", ".join(dict.fromkeys(c.site or "?" for c in cap.calls))
    torch_own = [c for c in cap.calls if c.compiles_nothing]
    if torch_own:
        names = ", ".join(dict.fromkeys(f"{c.target}.compile()" for c in torch_own))
        return (
            f"torch.compile was called ({sites}) but nothing was compiled: {names} on a module "
            "whose forward is torch's own compiles nothing (Dynamo skips torch's code); use "
            "torch.compile(module), or compile a module of your own that holds it"
        )
    return (
        f"torch.compile was called ({sites}) but nothing was compiled while the script ran (the "
        "compiled function never ran, or compiling is disabled)"
    )


def _add_host_summary(p: Profile, capture: RecorderCapture) -> list[str]:
    """The recorder's parts of the profile; its warnings. A summary that fails (it reads the
    user's source files) costs those parts, never the profile."""
    try:
        host = summarize(capture, p.steps.series)
    except Exception as exc:
        log.debug("probe recorder: its summary failed", exc_info=True)
        return [f"probe recorder could not report: {type(exc).__name__}: {exc}"]
    p.dispatch, p.transfers, p.syncs, p.loops = (
        host.dispatch,
        host.transfers,
        host.syncs,
        host.loops,
    )
    if host.ragged is not None:
        p.ragged = host.ragged
    return host.warnings


def _loader_roles(p: Profile) -> None:
    """Each loader of the batch-shape table takes the DataLoader probe's role (train: a step
    followed its batches), by the loop that fetched them."""
    ragged = given(p.ragged)
    loaders = given(ragged.loaders) if ragged is not None else None
    roles = {d.site: given(d.role) for d in given(p.dataloaders) or [] if d.site}
    for entry in loaders or []:
        role = roles.get(entry.site) if entry.site else None
        if role is not None:
            entry.role = role


def _step_timeline(rec: RunRecord) -> _StepTimeline:
    ends = rec.step_ends
    warnings: list[str] = []
    step0_start = rec.t_start
    first_fetch = rec.loaders.first_fetch_t if rec.loaders is not None else None
    if ends and first_fetch is not None and first_fetch < ends[0]:
        step0_start = first_fetch
    times = step_stats.step_times(step0_start, ends)
    measured = step_stats.measured_indices(len(ends), rec.warmup)
    kept = [i for i in measured if i not in rec.instrumented]
    if kept:
        measured = kept
    elif measured and rec.instrumented & set(measured):
        warnings.append(
            "every measured step was inside the recorder's window, which slows the steps it "
            "records: step times are inflated; run more steps or use --window 0"
        )
    waits = rec.loaders.wait_by_step if rec.loaders is not None else {}
    # One source for the warm-up every part shows (header, series, charts): none when the run
    # had no more steps than --warmup, since the statistics then include them.
    warmup = rec.warmup if len(ends) > rec.warmup else 0
    series = step_stats.series(step0_start, rec.t_start, ends, warmup, waits)
    coll = step_collective_s(rec.collectives) if rec.collectives is not None else None
    for r in series:
        r.instrumented = r.index in rec.instrumented
        if coll is not None:
            r.collective_s = round(coll.get(r.index, 0.0), 6)
    steps = Steps(
        count=len(ends),
        measured=len(measured),
        warmup=warmup,
        time_s=step_stats.time_stats([times[i] for i in measured]),
        marked_by=sorted(rec.step_sources),
        instrumented=sorted(i for i in rec.instrumented if i < len(ends)),
        series=series,
    )
    if rec.step_marker is not None:
        steps.marker = rec.step_marker
    if rec.slow_steps is not None:  # the key wherever the stack sampler ran: [] for none slow
        steps.slow = [s for s in rec.slow_steps if s.index < len(ends)]
    if 0 < len(ends) <= rec.warmup:
        warnings.append(
            f"only {len(ends)} step(s), not more than --warmup {rec.warmup}: statistics include "
            "warm-up steps"
        )
    if not ends and rec.outcome.status == "ok":
        warnings.append(
            "no training steps were seen: no torch.optim optimizer stepped and no backward pass "
            "ran; mark steps with gpuopt.step() (import gpuopt) in loops without either"
        )
    return _StepTimeline(steps, times, measured, warnings)


def _breakdown(rec: RunRecord, timeline: _StepTimeline, d: Dispatch) -> Breakdown:
    measured, times = timeline.measured, timeline.times
    waits = rec.loaders.wait_by_step if rec.loaders is not None else {}
    m_times = [times[i] for i in measured]
    m_waits = [min(waits.get(i, 0.0), times[i]) for i in measured]
    h2d = d.h2d_share if isinstance(d.h2d_share, float) else 0.0
    sync = d.sync_share if isinstance(d.sync_share, float) else 0.0
    between = d.between_ops_share if isinstance(d.between_ops_share, float) else None
    collective = None
    if rec.collectives is not None:
        coll = step_collective_s(rec.collectives)
        collective = [min(coll.get(i, 0.0), times[i]) for i in measured]
    return step_stats.breakdown(
        m_times,
        m_waits,
        h2d=[h2d * t for t in m_times] if h2d else None,
        sync=[sync * t for t in m_times] if sync else None,
        other_share=between,
        collective=collective,
    )


def attach_window_traces(profile: Profile) -> list[str]:
    """On a GPU run, analyse the torch.profiler window's trace(s) into ``gpu``, ``trace`` and
    ``tables`` (the same analyses as ``gpuopt report TRACE``). A trace that cannot be read is a
    warning (returned), never a lost profile."""
    files = profile.trace_files or []
    if not files:
        return []
    from gpuopt.assemble.trace_profile import add_trace_to_profile

    warnings = []
    for f in files:
        try:
            add_trace_to_profile(profile, Path(f))
        except GpuoptError as exc:
            warnings.append(f"profiler window trace not analysed: {exc}")
        except Exception as exc:  # a bug in an analysis must not lose the run's profile
            log.debug("the profiler window trace not analysed", exc_info=True)
            warnings.append(f"profiler window trace not analysed: {type(exc).__name__}: {exc}")
    return warnings
