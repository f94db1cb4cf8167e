"""``gpuopt optimize``: baseline → sweep → plan → rewrite → ablation and candidate runs → verify →
measure → ``optimize.json``, the diff on stdout, the report on stderr.

The order of runs alternates the two sides: baseline 1, each fix alone (ablation), candidate 1,
baseline 2, candidate 2. A fix whose run alone fails (crash, or training changed) is dropped
before the candidate runs that follow; when only the second baseline shows that it failed (its
loss floor was needed), candidate 1 is run again without it.
"""

from __future__ import annotations

import datetime as _dt
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from gpuopt.atomic_write import write_atomic
from gpuopt.errors import GpuoptError
from gpuopt.model.document import load_profile
from gpuopt.model.optimize import OptimizeDocument, RunResult, RuntimeFixes
from gpuopt.model.profile import Profile
from gpuopt.model.records import TrainingRecord, given
from gpuopt.optimize.catalogue import BY_NAME
from gpuopt.optimize.options import OptimizeOptions
from gpuopt.optimize.plan import PlanInput, PlannedFix, plan_fixes
from gpuopt.optimize.progress import Phases
from gpuopt.optimize.runs import Done, Launch, RunSpec, run_once
from gpuopt.optimize.runtime import encode_fixes
from gpuopt.optimize.source_files import (
    SourceSet,
    unified_diff,
    write_in_place,
    write_private_copies,
)
from gpuopt.optimize.verify import with_transform_check

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


def optimize_command(opts: OptimizeOptions) -> int:
    """Run it all; returns the exit code (0 when it finished, the script's code when the baseline
    failed)."""
    from gpuopt.runner.target import Target, check_target

    target = Target(opts.script, opts.module, list(opts.args))
    check_target(target)
    unknown = [f for f in opts.fixes if f not in BY_NAME]
    if unknown:
        raise GpuoptError(
            f"unknown fix {unknown[0]!r}; fixes: {', '.join(BY_NAME)} (see gpuopt optimize --help)"
        )
    out = _out_dir(opts, target.stem)
    launch = Launch(opts.script, opts.module, opts.args, opts.steps, opts.warmup, opts.seed)
    launch.timeout_s = opts.timeout_s
    if opts.memory_for is not None:
        from gpuopt.memory.devices import device_memory

        device_memory(opts.memory_for)  # refused before anything runs, with a one-line reason
        launch.memory_for = opts.memory_for
    doc = OptimizeDocument(script=target.display, argv=list(opts.args), steps=opts.steps)
    doc.seed = opts.seed
    with Phases(quiet=opts.quiet) as phases:
        st = _State(opts, out, launch, phases, doc)
        return _optimize(st)


def _out_dir(opts: OptimizeOptions, stem: str) -> Path:
    if opts.out is None:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        return Path("gpuopt-runs") / f"{stem}-optimize-{stamp}"
    if (opts.out / OPTIMIZE_FILE).exists() and not opts.force:
        raise GpuoptError(
            f"{opts.out}: holds an earlier gpuopt optimize run; pass --force to replace it"
        )
    return opts.out


def _optimize(st: _State) -> int:
    given_base = st.opts.baseline is not None
    base = _given_baseline(st) if given_base else _baseline(st)
    if base is None:
        return _baseline_failed(st)
    st.doc.baseline = base
    fixes = _plan(st, base)
    chosen = [f for f in fixes if f.selected]
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
    if given_base and _baseline(st) is None:  # the comparison needs a run with its losses
        return _baseline_failed(st)
    kept = _ablation(st, chosen)
    kept = _candidates(st, kept)
    return _finish(st, fixes, kept)


def _runs_to_come(opts: OptimizeOptions, fixes: int, given_base: bool) -> int:
    """The runs still planned once the fixes are chosen: the baseline (with --baseline DIR),
    each fix alone, candidate 1, baseline 2, candidate 2 (a dropped fix adds a re-run)."""
    ablation = 0 if opts.quick or fixes == 1 else fixes
    return int(given_base) + ablation + 2 + (0 if opts.quick else 1)


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


def _baseline(st: _State) -> Profile | None:
    done = _run(st, RunSpec("baseline 1", "baseline", st.dir / "runs" / "baseline-1"))
    if done.profile is None or done.result.status != "ok":
        return None
    return done.profile


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
    spec.base = st.dir
    st.phases.run(spec.label)
    done = run_once(st.launch, spec)
    st.runs.append(done)
    st.doc.runs.append(done.result)
    return done


# -- plan and sources --------------------------------------------------------------------------
def _plan(st: _State, base: Profile) -> list[PlannedFix]:
    from gpuopt.optimize.child_runs import aot_for, loops_for, sweep_for

    st.phases.phase("planning fixes")
    cuda = base.environment.device == "cuda"
    script_text = None
    if st.opts.script is not None:
        script_text = Path(st.opts.script).read_text(encoding="utf-8", errors="replace")
    inp = PlanInput(base, list(st.opts.fixes), cuda, script_text, st.opts.script)
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
        sources = _sources([fix])
    except GpuoptError as exc:
        fix.selected = fix.applicable = False
        fix.reason = f"its source form cannot be applied: {exc}"
        st.doc.warnings.append(f"{fix.name}: not used: {exc}")
        return
    if not sources.changed() and not fix.has_runtime:
        fix.selected = fix.applicable = False
        fix.reason = f"nothing to change: every site was left alone ({fix.reason})"


def _sources(fixes: list[PlannedFix], runtime_only: bool = False, run: bool = False) -> SourceSet:
    """The user's files with the source forms of ``fixes`` applied (in memory). For a run
    (``run``), a model transform comes from its run-time form alone: applied after the first
    step, it is checked there on the model's own batch (runtime.TRANSFORM_CHECK)."""
    sources = SourceSet()
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
        changed = _sources(fixes, run=True).changed()
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
    """Each fix alone, once (not with --quick, nor with a single fix): the fixes that ran and
    did not fail; their results go into the document."""
    if st.opts.quick or len(chosen) == 1:
        return chosen
    kept = []
    for fix in chosen:
        done = _run(st, _spec(st, f"only {fix.name}", "ablation", [fix]))
        if _crashed(done):
            _drop(st, fix, f"the run with only this fix failed: {_why(done)}")
            continue
        kept.append(fix)
    return kept


def _candidates(st: _State, kept: list[PlannedFix]) -> list[PlannedFix]:
    """Candidate 1, baseline 2, then the verdict on each fix from its own run (its ablation run,
    or candidate 1 when it is the only fix): dropped when that run failed, changed the training,
    or was measurably slower. Candidate 1 is run again without the dropped fixes (the first one
    stays in the record as an ablation run), then candidate 2."""
    if not kept:
        return kept
    c1 = _run(st, _spec(st, "candidate 1", "candidate", kept))
    b2 = _run(st, RunSpec("baseline 2", "baseline", st.dir / "runs" / "baseline-2"))
    bad = _judge(st, kept, c1, b2)
    if bad or _crashed(c1):
        if not bad:  # all of them together failed, none alone: no way to tell which
            bad = {f.name: f"the run with every fix failed: {_why(c1)}" for f in kept}
        for f in kept:
            if f.name in bad:
                _drop(st, f, bad[f.name])
        kept = [f for f in kept if f.name not in bad]
        c1.result.role, c1.result.label = "ablation", "every fix (before dropping)"
        if not kept:
            return kept
        st.phases.total += 1
        c1 = _run(st, _spec(st, "candidate 1b", "candidate", kept))
        if _crashed(c1):
            for f in kept:
                _drop(st, f, f"the candidate run failed: {_why(c1)}")
            return []
    if st.opts.quick:
        return kept
    c2 = _run(st, _spec(st, "candidate 2", "candidate", kept))
    if _crashed(c2):
        st.doc.warnings.append(f"the second candidate run failed: {_why(c2)}")
    return kept


def _judge(st: _State, kept: list[PlannedFix], c1: Done, b2: Done) -> dict[str, str]:
    from gpuopt.optimize.results import run_gain, run_verdict

    """Fix name → why it goes, for each fix whose own run failed, changed the training (judged
    now that the baseline's floor is known) or was measurably slower."""
    b1 = _first(st, "baseline")
    out: dict[str, str] = {}
    for fix in kept:
        own = _find(st, f"only {fix.name}") or (c1 if len(kept) == 1 else None)
        if own is None or b1 is None:
            continue
        if _crashed(own):
            out[fix.name] = f"the run with this fix failed: {_why(own)}"
            continue
        v = run_verdict(b1, b2, own, [fix])
        if fix.kind.transform:
            v = with_transform_check(v, own.transform_check(), fix.kind.tolerance)
        if v.verified == "failed" and not fix.equivalent_only:
            out[fix.name] = f"training changed with this fix: {v.detail}"
            continue
        g = run_gain([b1, b2], [own], [fix], skip=fix.kind.settle_steps)
        if not (g.measurable and g.speedup is not None and g.speedup < 1.0):
            continue
        if fix.kind.gpu_gain and not _on_gpu(st):
            fix.notes.append(
                f"on this CPU it measured {g.speedup:.2f}x: what it removes costs time only on a "
                "GPU (a sync waits for the device), and keeping values on the device adds a few "
                "small ops here"
            )
            continue
        out[fix.name] = f"slower in the training run ({g.speedup:.2f}x, {g.label})"
    return out


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


def _first(st: _State, role: str) -> Done | None:
    return next((d for d in st.runs if d.result.role == role and d.profile is not None), None)


def _find(st: _State, label: str) -> Done | None:
    return next((d for d in st.runs if d.result.label == label), None)


def _training(done: Done | None) -> TrainingRecord | None:
    if done is None or done.profile is None:
        return None
    return given(done.profile.training)


# -- results -----------------------------------------------------------------------------------
def _finish(st: _State, fixes: list[PlannedFix], kept: list[PlannedFix]) -> int:
    from gpuopt.optimize.results import fill_results

    st.phases.phase("verifying and measuring")
    fill_results(st.doc, st.runs, fixes, kept, st.opts.apply)
    home = [f for f in kept if not (st.opts.apply and f.has_runtime)]
    sources = _sources(home)
    st.doc.diff = unified_diff(sources.changed())
    if st.opts.apply:
        applied = [f for f in kept if f.has_runtime]
        _fixes_file(st, applied, st.dir, copies=False)
    st.doc.cost_s = round(time.perf_counter() - st.t0, 2)
    _write_doc(st)
    st.phases.close()
    _tell(st, sources, kept)
    return 0


def _write_doc(st: _State) -> None:
    data = msgspec.json.format(msgspec.json.encode(st.doc), indent=2) + b"\n"
    write_atomic(st.dir / OPTIMIZE_FILE, data)


def _tell(st: _State, sources: SourceSet, kept: list[PlannedFix]) -> None:
    from gpuopt.optimize.render import render_text

    if not st.opts.quiet:
        print(render_text(st.doc), file=sys.stderr)
    if st.opts.write:
        for line in write_in_place(sources.changed()):
            print(f"gpuopt: {line}", file=sys.stderr)
    elif st.doc.diff and st.opts.diff:
        sys.stdout.write(st.doc.diff)
        sys.stdout.flush()
    if st.opts.apply and any(f.has_runtime for f in kept):
        shown = st.opts.script or f"-m {st.opts.module}"
        print(
            f"gpuopt: run-time fixes kept in {st.dir / 'fixes.json'}; train with them: "
            f"gpuopt run --fixes {st.dir} {shown} (or profile: gpuopt profile --fixes ...)",
            file=sys.stderr,
        )
    print(f"gpuopt: {st.dir / OPTIMIZE_FILE} written", file=sys.stderr)


__all__ = ["OPTIMIZE_FILE", "OptimizeOptions", "RunResult", "optimize_command"]
