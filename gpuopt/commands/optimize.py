"""``gpuopt optimize``: baseline → sweep → plan → rewrite → ablation and candidate runs → verify →
measure → ``optimize.json``, the diff on stdout, the report on stderr.

Baseline 1 is the profile the fixes are planned from (instrumented: never timed). The timed runs
(:mod:`gpuopt.optimize.measure.policy`) alternate the two sides: baseline 2, each fix alone
(ablation), candidate 1, baseline 3, candidate 2, then baseline/candidate pairs until each side
is measured within ±5%, the candidate is found slower, or the time budget or the runs cap is
reached. A fix whose run alone fails (crash, training changed, slower) is dropped before the
candidate runs that follow; when only the third baseline shows that it failed (the loss floor
was needed), candidate 1 is run again without it. Once measured, a fix without a measured gain
is dropped unless it was asked for by name or its gain is a GPU's and there is none.
"""

from __future__ import annotations

import datetime as _dt
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from gpuopt.atomic_write import write_atomic
from gpuopt.errors import GpuoptError, say
from gpuopt.fixes.catalogue import BY_NAME
from gpuopt.fixes.plan import PlanInput, PlannedFix, plan_fixes
from gpuopt.fixes.runtime import encode_fixes
from gpuopt.model.document import load_profile
from gpuopt.model.optimize import Gain, OptimizeDocument, RunResult, RuntimeFixes
from gpuopt.model.profile import Profile
from gpuopt.optimize.measure.policy import DEFAULT_TIME_BUDGET_S, Budget, keep_or_drop, predicted_s
from gpuopt.optimize.options import OptimizeOptions
from gpuopt.optimize.output.source_files import (
    SourceFile,
    SourceSet,
    changed_on_disk,
    check_replaceable,
    check_writable,
    shown_path,
    unified_diff,
    write_in_place,
    write_private_copies,
)
from gpuopt.optimize.run.progress import Phases
from gpuopt.optimize.run.runs import Done, Launch, RunSpec, run_once, timed
from gpuopt.paths import default_run_dir, reason, refuse_inputs, stat_or_none, write_stdout
from gpuopt.script import interrupts

OPTIMIZE_FILE = "optimize.json"


@dataclass
class _State:
    opts: OptimizeOptions
    dir: Path
    launch: Launch
    phases: Phases
    doc: OptimizeDocument
    runs: list[Done] = field(default_factory=list)
    t0: float = field(default_factory=time.perf_counter)
    # each user file's bytes when first read: every plan, run, diff and write starts from them
    reads: dict[Path, bytes] = field(default_factory=dict)
    budget: Budget = field(default_factory=lambda: Budget(DEFAULT_TIME_BUDGET_S))
    stopped: str = ""  # why the measuring stopped (measuring.stop_reason)
    measured_alone: bool = False  # each fix ran alone (ablation)
    writes: list[SourceFile] = field(default_factory=list)  # --write: the files to replace

    @property
    def extend(self) -> bool:
        """Pairs may be added past the fewest runs (not --quick, unless a budget is given)."""
        return not self.opts.quick or self.opts.time_budget_s is not None


def optimize_command(opts: OptimizeOptions) -> int:
    """Run it all; returns the exit code (0 when it finished, the script's code when the baseline
    failed). SIGTERM unwinds it as Ctrl-C does: the runs in progress ended, temporary files
    removed, a file being written left whole (:mod:`gpuopt.script.interrupts`)."""
    with interrupts.terminate_unwinds():
        return _optimize_command(opts)


def _optimize_command(opts: OptimizeOptions) -> int:
    from gpuopt.script.target import Target, check_target

    target = Target(opts.script, opts.module, list(opts.args))
    check_target(target)
    _check_flags(opts)
    if opts.write:  # the script's file checked now, not after the runs
        _check_script_writable(opts)
    out = _out_dir(opts, target.stem)
    launch = Launch(opts.script, opts.module, opts.args, opts.steps, opts.warmup, opts.seed)
    launch.timeout_s = opts.timeout_s
    launch.memory_for = opts.memory_for
    doc = OptimizeDocument(script=target.display, argv=list(opts.args), steps=opts.steps)
    doc.seed = opts.seed
    limit = opts.time_budget_s if opts.time_budget_s is not None else DEFAULT_TIME_BUDGET_S
    doc.time_budget_s = limit
    with Phases(quiet=opts.quiet) as phases:
        st = _State(opts, out, launch, phases, doc)
        st.budget = Budget(limit, st.t0)
        return _optimize(st)


def _check_flags(opts: OptimizeOptions) -> None:
    """Every flag refused, with its one-line reason, before anything is made or run."""
    unknown = [f for f in opts.fixes if f not in BY_NAME]
    if unknown:
        raise GpuoptError(
            f"unknown fix {unknown[0]!r}; fixes: {', '.join(BY_NAME)} (see gpuopt optimize --help)"
        )
    if opts.memory_for is not None:
        from gpuopt.memory.devices import device_memory

        device_memory(opts.memory_for)


def _check_script_writable(opts: OptimizeOptions) -> None:
    """``--write``: the script's file must take its new text (see
    :func:`~gpuopt.optimize.output.source_files.check_replaceable`): known before the first run.
    The other files the fixes change are checked once they are planned."""
    from gpuopt.script.target import main_file

    main = main_file(opts.script) if opts.script is not None else None
    if main is not None:
        check_replaceable(Path(main), shown_path(Path(main)))


def _out_dir(opts: OptimizeOptions, stem: str, now: _dt.datetime | None = None) -> Path:
    """``-o DIR`` (or the default, ``gpuopt-runs/<stem>-optimize-<time>``, ``-2`` ... when
    another run took it that second), made now: one that cannot be a directory, or holds an
    earlier optimize run without ``--force``, is refused before any run."""
    out = opts.out if opts.out is not None else default_run_dir(f"{stem}-optimize", now)
    st = stat_or_none(out)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise GpuoptError(f"{out}: exists and is not a directory; pick another -o DIR")
    if (out / OPTIMIZE_FILE).exists() and not opts.force:
        raise GpuoptError(
            f"{out}: holds an earlier gpuopt optimize run; pass --force to replace it"
        )
    reads = [Path(p) for p in (opts.script, opts.baseline) if p is not None]
    for name in (OPTIMIZE_FILE, "fixes.json"):  # never the script, whatever it is called
        refuse_inputs(out / name, reads, "-o")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GpuoptError(f"{out}: cannot create the directory: {reason(exc)}") from None
    return out


def _optimize(st: _State) -> int:
    given_base = st.opts.baseline is not None
    base = _given_baseline(st) if given_base else _baseline(st)
    if base is None:
        return _baseline_failed(st)
    st.doc.baseline = base
    fixes = _plan(st, base)
    chosen = [f for f in fixes if f.selected]
    if st.opts.write:  # refused now, not after every run: a read-only file, a changed one
        st.writes = _sources(st, chosen).changed()
        check_writable(st.writes)
    if not st.opts.measure or not chosen:
        if not chosen:
            st.doc.warnings.append(
                "no fix to apply: see each fix's reason"
                if fixes
                else "no fix to apply: nothing in the profile calls for one"
            )
        st.doc.status = "planned"
        return _finish(st, fixes, chosen)
    st.phases.total = len(st.runs) + _runs_to_come(st.opts, len(chosen), given_base)
    if given_base and _baseline(st, timed=True) is None:  # the comparison needs its losses
        return _baseline_failed(st)
    if _timed_baseline(st) is None:
        return _baseline_failed(st)
    kept = _ablation(st, chosen)
    kept = _candidates(st, kept)
    kept = _memory(st, kept)
    return _finish(st, fixes, kept)


def _runs_to_come(opts: OptimizeOptions, fixes: int, given_base: bool) -> int:
    """The runs still planned once the fixes are chosen: the baseline (with --baseline DIR),
    a timed baseline, each fix alone, candidate 1, baseline 3, candidate 2 (a dropped fix adds
    a re-run, each pair measured past these two more)."""
    ablation = 0 if opts.quick or fixes == 1 else fixes
    return int(given_base) + 1 + ablation + 2 + (0 if opts.quick else 1)


# -- baseline ----------------------------------------------------------------------------------
def _given_baseline(st: _State) -> Profile:
    """``--baseline DIR``: plan from an earlier ``gpuopt profile`` run (not profiled again; the
    measured comparison still runs the script, since it needs the losses of every step)."""
    assert st.opts.baseline is not None
    profile = load_profile(st.opts.baseline)
    if profile.status != "ok":
        raise GpuoptError(f"{st.opts.baseline}: that run ended with status {profile.status}")
    st.phases.note(f"planning from {st.opts.baseline} (not profiled again)")
    return profile


def _baseline(st: _State, timed: bool = False) -> Profile | None:
    """Baseline 1: the profile the fixes are planned from (with --baseline DIR, planned from
    already: a timed run)."""
    spec = RunSpec("baseline 1", "baseline", st.dir / "runs" / "baseline-1", timed=timed)
    done = _run(st, spec)
    if done.profile is None or done.result.status != "ok":
        return None
    return done.profile


def _next_baseline(st: _State) -> Done:
    n = sum(1 for d in st.runs if d.result.role == "baseline") + 1
    return _run(st, RunSpec(f"baseline {n}", "baseline", st.dir / "runs" / f"baseline-{n}"))


def _timed_baseline(st: _State) -> Done | None:
    """The first timed baseline run (none of gpuopt's profiling in it); None when it failed."""
    done = _next_baseline(st)
    return None if _crashed(done) else done


def _baseline_failed(st: _State) -> int:
    done = st.runs[-1]
    code = done.result.exit_code or 1
    why = done.stderr_tail.splitlines()[-1] if done.stderr_tail else f"exit code {code}"
    st.doc.status = "error"
    st.doc.warnings.append(f"the baseline run failed ({why}); nothing was changed")
    if done.profile is not None:
        st.doc.baseline = done.profile
    _write_doc(st)
    print(f"gpuopt: the baseline run failed: {why}", file=sys.stderr)
    print(f"gpuopt: its profile is in {st.dir / done.result.dir}", file=sys.stderr)
    return code


def _run(st: _State, spec: RunSpec) -> Done:
    if st.writes:  # --write: a file changed meanwhile is said before the run, not after all
        check_writable(st.writes)
    spec.base = st.dir
    st.phases.run(spec.label)
    done = run_once(st.launch, spec)
    st.runs.append(done)
    st.doc.runs.append(done.result)
    return done


# -- plan and sources --------------------------------------------------------------------------
def _plan(st: _State, base: Profile) -> list[PlannedFix]:
    from gpuopt.optimize.run.analyses import aot_for, loops_for, sweep_for

    st.phases.phase("planning fixes")
    cuda = base.environment.device == "cuda"
    from gpuopt.script.target import main_file

    script_text = None
    main = main_file(st.opts.script) if st.opts.script is not None else None
    if main is not None:  # the script, or a directory's __main__.py (none in a zip archive)
        script_text = main.read_text(encoding="utf-8", errors="replace")
    inp = PlanInput(base, list(st.opts.fixes), cuda, script_text, str(main) if main else None)
    inp.amp_dtype = _amp_dtype(st.opts.amp_dtype, cuda)
    sweep, error = sweep_for(st.opts, base, st.dir, st.phases)
    inp.sweep, inp.sweep_error = sweep, error
    inp.aot, inp.aot_error = aot_for(st.opts, st.dir, st.phases)
    inp.loops = loops_for(st.opts, base, st.dir, st.phases)
    fixes = plan_fixes(inp)
    for fix in fixes:
        _check_edits(st, fix)
    return fixes


def _amp_dtype(asked: str, cuda: bool) -> str:
    """``--amp-dtype``: ``auto`` is bf16, unless the GPU has no bf16 (V100, T4): fp16."""
    if asked != "auto":
        return asked
    if cuda:
        import torch

        if torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
            return "fp16"
    return "bf16"


def _check_edits(st: _State, fix: PlannedFix) -> None:
    """A fix whose source form cannot be applied (a file libcst cannot parse or gpuopt cannot
    read) is not used, with the one-line reason; the others go on. Nor is a fix with only a
    source form whose rewrite changes nothing (every site left alone, each with its reason):
    it would cost runs and be reported applied with an empty diff."""
    if not fix.selected or not fix.edits:
        return
    try:
        sources = _sources(st, [fix])
    except GpuoptError as exc:
        fix.selected = fix.applicable = False
        fix.reason = f"its source form cannot be applied: {exc}"
        st.doc.warnings.append(f"{fix.name}: not used: {exc}")
        return
    if not sources.changed() and not fix.has_runtime:
        fix.selected = fix.applicable = False
        fix.reason = f"nothing to change: every site was left alone ({fix.reason})"


def _sources(
    st: _State, fixes: list[PlannedFix], runtime_only: bool = False, run: bool = False
) -> SourceSet:
    """The user's files with the source forms of ``fixes`` applied (in memory), from the text
    first read (``st.reads``). For a run (``run``), a model transform comes from its run-time
    form alone: applied after the first step, it is checked there on the model's own batch
    (:data:`gpuopt.fixes.model_transforms.runtime.TRANSFORM_CHECK`)."""
    sources = SourceSet(reads=st.reads)
    for fix in fixes:
        if (runtime_only and fix.has_runtime) or (run and fix.kind.transform):
            continue
        for edit in fix.edits:
            sources.rewrite(edit.path, edit.codemod)
    return sources


def _fixes_file(st: _State, fixes: list[PlannedFix], where: Path, copies: bool) -> Path:
    """``where/fixes.json``: the run-time forms of ``fixes`` (and, for a measured run, the
    private copies of the rewritten files)."""
    rf = RuntimeFixes(fixes=[f.name for f in fixes])
    for fix in fixes:
        rf.loaders += fix.loaders
        rf.non_blocking_sites += fix.non_blocking_sites
        rf.backend_flags.update(fix.backend_flags)
        rf.model_transforms += fix.model_transforms
    if copies:
        changed = _sources(st, fixes, run=True).changed()
        rf.sources = write_private_copies(changed, where / "sources")
    write_atomic(where / "fixes.json", encode_fixes(rf))
    return where


# -- runs --------------------------------------------------------------------------------------
def _spec(st: _State, label: str, role: str, fixes: list[PlannedFix]) -> RunSpec:
    slug = label.replace(" ", "-")
    d = st.dir / "runs" / slug
    spec = RunSpec(label, role, d, [f.name for f in fixes])  # type: ignore[arg-type]
    spec.fixes_dir = _fixes_file(st, fixes, d / "fixes", copies=True)
    return spec


def _ablation(st: _State, chosen: list[PlannedFix]) -> list[PlannedFix]:
    """Each fix alone, once (not with --quick, nor with a single fix, nor when the time budget
    cannot hold them): the fixes that ran and did not fail; their results go into the
    document."""
    if st.opts.quick or len(chosen) == 1:
        return chosen
    walls = [d.result.wall_s for d in timed(st.runs, "baseline")]
    if not st.budget.fits(predicted_s(walls) * (len(chosen) + 3)):
        st.doc.warnings.append(
            f"each fix alone was not measured: {len(chosen)} more runs would pass the time "
            f"budget ({st.budget.limit_s:.0f} s); the fixes are judged together"
        )
        st.phases.total -= len(chosen)
        return chosen
    st.measured_alone = True
    kept = []
    for fix in chosen:
        done = _run(st, _spec(st, f"only {fix.name}", "ablation", [fix]))
        if _crashed(done):
            _drop(st, fix, f"the run with only this fix failed: {_why(done)}")
            continue
        kept.append(fix)
    return kept


def _candidates(st: _State, kept: list[PlannedFix]) -> list[PlannedFix]:
    """Candidate 1, the next baseline, then the verdict on each fix from its own run (its
    ablation run, or candidate 1 when it is the only fix): dropped when that run failed, changed
    the training, or was measured slower. Candidate 1 is run again without the dropped fixes
    (the first one stays in the record as an ablation run); then the measuring goes on
    (:func:`_extend`) and each fix's fate is settled on the whole measure (:func:`_settle`)."""
    from gpuopt.optimize.output.results import EVERY_FIX

    if not kept:
        return kept
    c1 = _run(st, _spec(st, "candidate 1", "candidate", kept))
    _next_baseline(st)
    bad = _judge(st, kept, c1)
    if bad or _crashed(c1):
        if not bad:  # all of them together failed, none alone: no way to tell which
            bad = {f.name: f"the run with every fix failed: {_why(c1)}" for f in kept}
        for f in kept:
            if f.name in bad:
                _drop(st, f, bad[f.name])
        kept = [f for f in kept if f.name not in bad]
        c1.result.role, c1.result.label = "ablation", EVERY_FIX
        if not kept:
            return kept
        st.phases.total += 1
        c1 = _run(st, _spec(st, "candidate 1b", "candidate", kept))
        if _crashed(c1):
            for f in kept:
                _drop(st, f, f"the candidate run failed: {_why(c1)}")
            return []
    if not _extend(st, kept):
        return []
    return _settle(st, kept)


def _extend(st: _State, kept: list[PlannedFix]) -> bool:
    """Candidate 2 (not with --quick), then baseline/candidate pairs until
    :func:`~gpuopt.optimize.measure.policy.stop_reason` says stop; False when a candidate run
    failed (its fixes are dropped)."""
    from gpuopt.optimize.measure.policy import stop_reason
    from gpuopt.optimize.output.results import run_gain

    n = sum(1 for d in st.runs if d.result.role == "candidate")
    if not st.opts.quick:
        n += 1
        c2 = _run(st, _spec(st, f"candidate {n}", "candidate", kept))
        if _crashed(c2):
            return _candidate_failed(st, kept, c2)
    settle = max(f.kind.settle_steps for f in kept)
    while True:
        bases, cands = timed(st.runs, "baseline"), timed(st.runs, "candidate")
        g = run_gain(bases, cands, kept, settle)
        pair = predicted_s([d.result.wall_s for d in bases])
        pair += predicted_s([d.result.wall_s for d in cands])
        runs = (len(bases), len(cands))
        st.stopped = stop_reason(g, runs, st.extend, st.budget.fits(pair)) or ""
        if st.stopped:
            return True
        st.phases.total += 2
        _next_baseline(st)
        n += 1
        c = _run(st, _spec(st, f"candidate {n}", "candidate", kept))
        if _crashed(c):
            return _candidate_failed(st, kept, c)


def _candidate_failed(st: _State, kept: list[PlannedFix], done: Done) -> bool:
    """A candidate run that failed after others passed: a fix that fails sometimes goes."""
    for f in kept:
        _drop(st, f, f"a candidate run failed: {_why(done)}")
    return False


def _settle(st: _State, kept: list[PlannedFix]) -> list[PlannedFix]:
    """Once measured: each fix's fate from its own runs' gain (alone, or the candidate's when it
    is the only fix or none ran alone) — slower goes; no measurable gain goes too, unless asked
    for by name or GPU-only without a GPU. A set measured slower goes whole when no fix alone
    told which."""
    from gpuopt.optimize.output.results import run_gain

    bases = timed(st.runs, "baseline")
    settle = max(f.kind.settle_steps for f in kept)
    whole = run_gain(bases, timed(st.runs, "candidate"), kept, settle)
    named = set(st.opts.fixes)
    out: list[PlannedFix] = []
    for fix in kept:
        g = _alone_gain(st, fix) if st.measured_alone and len(kept) > 1 else None
        g = g or whole
        fate = keep_or_drop(fix.kind, g, _on_gpu(st), fix.name in named, fix.expected_gain)
        if fate.drop is None and whole.verdict == "slower":
            fate = keep_or_drop(fix.kind, whole, _on_gpu(st), fix.name in named)
        if fate.drop is not None:
            _drop(st, fix, fate.drop)
            continue
        if fate.note:
            fix.notes.append(fate.note)
        out.append(fix)
    if out and len(out) < len(kept):
        gone = ", ".join(f.name for f in kept if f not in out)
        st.doc.warnings.append(
            f"the candidate runs carried {gone} too, dropped after they were measured: the "
            "gain shown is of every fix they carried"
        )
    return out


def _alone_gain(st: _State, fix: PlannedFix) -> Gain | None:
    """A fix's gain from its runs alone; a single run a little slower is run once more first
    (:func:`~gpuopt.optimize.measure.policy.clearly_slower`)."""
    from gpuopt.optimize.measure.policy import clearly_slower
    from gpuopt.optimize.output.results import run_gain

    labels = (f"only {fix.name}", f"only {fix.name} (again)")
    alone = [d for d in st.runs if d.result.label in labels and d.profile is not None]
    if not alone:
        return None
    g = run_gain(timed(st.runs, "baseline"), alone, [fix], skip=fix.kind.settle_steps)
    if g.verdict != "slower" or len(alone) > 1 or clearly_slower(g):
        return g
    st.phases.total += 1
    again = _run(st, _spec(st, labels[1], "ablation", [fix]))
    if not _crashed(again):
        alone.append(again)
    return run_gain(timed(st.runs, "baseline"), alone, [fix], skip=fix.kind.settle_steps)


def _judge(st: _State, kept: list[PlannedFix], c1: Done) -> dict[str, str]:
    """Fix name → why it goes, for each fix whose own run failed, changed the training (judged
    now that the baseline's floor is known: three baseline runs) or, measured alone among
    several fixes, was clearly slower in that run (dropped there: its size from one run, said
    so). The only fix is not dropped here for its speed: its candidate runs go on until the
    slowdown's size is measured (:func:`~gpuopt.optimize.measure.policy.stop_reason`), and
    :func:`_settle` drops it."""
    from gpuopt.optimize.measure.policy import clearly_slower
    from gpuopt.optimize.output.results import fix_verdict, run_gain

    baselines = [d for d in st.runs if d.result.role == "baseline" and d.profile is not None]
    bases = timed(st.runs, "baseline")
    out: dict[str, str] = {}
    for fix in kept:
        own = _find(st, f"only {fix.name}") or (c1 if len(kept) == 1 else None)
        if own is None or not baselines:
            continue
        if _crashed(own):
            out[fix.name] = f"the run with this fix failed: {_why(own)}"
            continue
        v = fix_verdict(baselines, [own], [fix])
        if v.verified == "failed" and not fix.equivalent_only:
            out[fix.name] = f"training changed with this fix: {v.detail}"
            continue
        if own is c1:  # the only fix: measured on with the candidate runs, sized, then judged
            continue
        g = run_gain(bases, [own], [fix], skip=fix.kind.settle_steps)
        # a little slower in one run: judged once measured more; a memory fix never for speed
        if clearly_slower(g) and not fix.kind.judged_by_memory:
            fate = keep_or_drop(fix.kind, g, _on_gpu(st), fix.name in st.opts.fixes)
            out[fix.name] = fate.drop or g.label
    return out


def _memory(st: _State, kept: list[PlannedFix]) -> list[PlannedFix]:
    """A fix judged by the memory it frees (``accumulation``): one more candidate run, not timed,
    with the baseline profile's memory probe (measured on a GPU, predicted with --memory-for);
    its step's peak against the baseline's (:mod:`gpuopt.optimize.measure.memory`). A fix whose
    peak grew goes; one that frees none stays as asked (it is opt-in: always named), its
    verdict said; without a peak on the baseline's side there is no run and no verdict."""
    from gpuopt.optimize.measure.memory import memory_change, step_peak
    from gpuopt.optimize.output.results import MEMORY_RUN

    judged = [f for f in kept if f.kind.judged_by_memory]
    if not judged or step_peak(st.doc.baseline) is None:
        return kept
    st.phases.total += 1
    spec = _spec(st, MEMORY_RUN, "candidate", kept)
    spec.timed = False
    done = _run(st, spec)
    if _crashed(done):
        for f in judged:
            _drop(st, f, f"its memory run failed: {_why(done)}")
        return [f for f in kept if f not in judged]
    change = memory_change(st.doc.baseline, done.profile)
    if change.verdict != "more":  # no gain: kept as asked, as a named fix without a speed gain
        return kept
    for f in judged:
        _drop(st, f, change.label)
    return [f for f in kept if f not in judged]


def _on_gpu(st: _State) -> bool:
    return st.doc.baseline is not None and st.doc.baseline.environment.device == "cuda"


def _crashed(done: Done) -> bool:
    return done.profile is None or done.result.status != "ok"


def _why(done: Done) -> str:
    tail = done.stderr_tail.splitlines()[-1] if done.stderr_tail else ""
    return tail or f"exit code {done.result.exit_code}"


def _drop(st: _State, fix: PlannedFix, reason: str) -> None:
    fix.selected = False
    fix.reason = reason
    st.doc.warnings.append(f"{fix.name}: dropped: {reason}")


def _find(st: _State, label: str) -> Done | None:
    return next((d for d in st.runs if d.result.label == label), None)


# -- results -----------------------------------------------------------------------------------
def _finish(st: _State, fixes: list[PlannedFix], kept: list[PlannedFix]) -> int:
    from gpuopt.optimize.output.results import fill_results

    st.phases.phase("verifying and measuring")
    fill_results(st.doc, st.runs, fixes, kept, st.opts.apply, st.stopped, reads=st.reads)
    home = [f for f in kept if not (st.opts.apply and f.has_runtime)]
    sources = _sources(st, home)
    st.doc.diff = unified_diff(sources.changed())
    if st.opts.apply:
        applied = [f for f in kept if f.has_runtime]
        _fixes_file(st, applied, st.dir, copies=False)
    st.doc.cost_s = round(time.perf_counter() - st.t0, 2)
    _write_doc(st)
    st.phases.close()
    if st.opts.write:  # refused in one line, before the report
        check_writable(sources.changed())
    _tell(st, sources, kept)
    return 0


def _write_doc(st: _State) -> None:
    data = msgspec.json.format(msgspec.json.encode(st.doc), indent=2) + b"\n"
    write_atomic(st.dir / OPTIMIZE_FILE, data)


def _tell(st: _State, sources: SourceSet, kept: list[PlannedFix]) -> None:
    from gpuopt.optimize.output.render import render_text

    if not st.opts.quiet:
        print(render_text(st.doc), file=sys.stderr)
    if st.opts.write:
        write_in_place(sources.changed(), lambda line: say(f"gpuopt: {line}"))
    elif st.doc.diff and st.opts.diff:
        for shown in changed_on_disk(sources.changed()):
            say(
                f"gpuopt: warning: {shown} changed since gpuopt read it; the diff is against "
                "the text gpuopt read and measured, and may not apply"
            )
        write_stdout(st.doc.diff)
    if st.opts.apply and any(f.has_runtime for f in kept):
        shown = st.opts.script or f"-m {st.opts.module}"
        print(
            f"gpuopt: run-time fixes kept in {st.dir / 'fixes.json'}; train with them: "
            f"gpuopt run --fixes {st.dir} {shown} (or profile: gpuopt profile --fixes ...)",
            file=sys.stderr,
        )
    print(f"gpuopt: {st.dir / OPTIMIZE_FILE} written", file=sys.stderr)


__all__ = ["OPTIMIZE_FILE", "OptimizeOptions", "RunResult", "optimize_command"]
