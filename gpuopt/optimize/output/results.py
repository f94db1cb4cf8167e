"""From the runs to ``optimize.json``'s verdicts: the candidate's gain and verification, and one
:class:`~gpuopt.model.optimize.FixResult` per planned fix (its own diff, what it changed and left
alone, its gain and verification from its run alone)."""

from __future__ import annotations

from pathlib import Path

from msgspec import UNSET, UnsetType

from gpuopt.errors import GpuoptError
from gpuopt.fixes.plan import PlannedFix
from gpuopt.model.optimize import FixResult, Gain, MemoryChange, OptimizeDocument, Verification
from gpuopt.model.records import TrainingRecord, given
from gpuopt.optimize.measure.speed import gain
from gpuopt.optimize.measure.verify import (
    compare_accumulated,
    compare_by_samples,
    compare_training,
    per_sample_times,
    with_transform_check,
    worst,
)
from gpuopt.optimize.output.source_files import SourceSet, unified_diff
from gpuopt.optimize.run.runs import Done, run_training_times, timed


def _training(done: Done | None) -> TrainingRecord | None:
    if done is None or done.profile is None:
        return None
    return given(done.profile.training)


def _ok(runs: list[Done], role: str) -> list[Done]:
    return [d for d in runs if d.result.role == role and d.profile is not None]


def fill_results(
    doc: OptimizeDocument,
    runs: list[Done],
    fixes: list[PlannedFix],
    kept: list[PlannedFix],
    apply: bool,
    stopped: str = "",
    reads: dict[Path, bytes] | None = None,
) -> None:
    """``stopped``: why the measuring stopped (:func:`gpuopt.optimize.measure.policy.stop_reason`);
    ``reads``: the user's files as first read (source_files.SourceSet), so that each fix's diff is
    from the text that was planned and measured."""
    baselines, candidates = _ok(runs, "baseline"), _ok(runs, "candidate")
    if candidates:
        doc.candidate = candidates[0].profile
    else:  # every fix dropped after candidate 1: its measure is still what was tried
        candidates = [d for d in _ok(runs, "ablation") if d.result.label == EVERY_FIX]
    if candidates:
        measured = kept or _carried(candidates[0], fixes)
        settle = max((f.kind.settle_steps for f in measured), default=0)
        cands = [d for d in candidates if d.result.timed is not False]
        doc.gain = run_gain(timed(runs, "baseline"), cands, measured, settle)
        if doc.gain.verdict == "slower" and not stopped:
            stopped = "slower"  # every fix dropped on its own run: no more runs were measured
        if stopped and isinstance(doc.gain.runs, list):  # both sides measured
            doc.gain.stopped = stopped
        if doc.gain.verdict != "slower" and all(_gpu_gain_unmeasured(f, doc) for f in measured):
            doc.gain = gpu_gain_here(doc.gain.stopped)  # slower goes, its size shown
        doc.speedup = doc.gain.speedup
        doc.verification = fix_verdict(baselines, candidates, measured)
        note = _output_note(baselines, candidates[0])
        if note:
            doc.warnings.append(note)
    for fix in fixes:
        result = _fix_result(fix, fix in kept, apply, runs, doc)
        _source_part(fix, result, apply and fix.has_runtime, reads)
        doc.fixes.append(result)


EVERY_FIX = "every fix (before dropping)"  # candidate 1's label once a fix was dropped after it


def _carried(run: Done, fixes: list[PlannedFix]) -> list[PlannedFix]:
    """The fixes a run carried (every one dropped after it ran)."""
    return [f for f in fixes if f.name in run.result.fixes]


def run_gain(
    baselines: list[Done], candidates: list[Done], fixes: list[PlannedFix], skip: int = 0
) -> Gain:
    """Steps per second, or samples per second when a fix changes the samples a step takes;
    from timed runs only (:func:`gpuopt.optimize.run.runs.timed`). A fix whose saving falls at
    epoch starts (the DataLoader's) is measured on the training's wall time: every step of
    each run, the first included (its label says so)."""
    if any(f.kind.whole_run for f in fixes) and not any(f.kind.per_sample for f in fixes):
        return gain(
            [_training_times(d) for d in baselines],
            [_training_times(d) for d in candidates],
            whole=True,
        )
    if not any(f.kind.per_sample for f in fixes):
        out = gain(
            [d.result.step_s for d in baselines], [d.result.step_s for d in candidates], skip=skip
        )
        if out.measurable and any(f.micro_batches > 1 for f in fixes):
            out.label += " (samples/s: the same samples a step)"
        return out
    out = gain(
        [per_sample_times(d.result.step_s, d.samples_per_step()) for d in baselines],
        [per_sample_times(d.result.step_s, d.samples_per_step()) for d in candidates],
        skip=skip,
    )
    if out.measurable:
        out.label += " (samples/s)"
    return out


def _training_times(done: Done) -> list[float]:
    return run_training_times(done.profile) if done.profile is not None else []


def run_verdict(baselines: list[Done], cand: Done, fixes: list[PlannedFix]) -> Verification:
    """One run's training against the first baseline's, every other baseline run giving the
    floor (after the same number of samples when a fix changes the batches: never step for
    step)."""
    b1 = baselines[0] if baselines else None
    others = [_training(d) for d in baselines[1:]]
    micro = max((f.micro_batches for f in fixes), default=0)
    if micro > 1:
        return compare_accumulated(_training(b1), others, _training(cand), micro, _tolerance(fixes))
    if any(f.kind.per_sample for f in fixes):
        base_k = b1.samples_per_step() if b1 is not None else None
        return compare_by_samples(_training(b1), _training(cand), base_k, cand.samples_per_step())
    v = compare_training(_training(b1), others, _training(cand), _tolerance(fixes))
    if any(f.kind.transform for f in fixes):
        v = with_transform_check(v, cand.transform_check(), _tolerance(fixes))
    return v


def fix_verdict(baselines: list[Done], runs: list[Done], fixes: list[PlannedFix]) -> Verification:
    """The verdict on the training of ``fixes`` from every run that carried them: the worst of
    them (:func:`gpuopt.optimize.measure.verify.worst`), so that one run's luck does not decide."""
    return worst([run_verdict(baselines, d, fixes) for d in runs if d.profile is not None])


def _tolerance(kept: list[PlannedFix]) -> float | None:
    """The loosest stated tolerance of the opt-in fixes kept (None: none states one)."""
    stated = [f.kind.tolerance for f in kept if f.kind.tolerance is not None]
    return max(stated) if stated else None


def _output_note(baselines: list[Done], cand: Done) -> str | None:
    """A warning when the candidate printed something else than a baseline that prints the
    same run after run (a script printing its own timings repeats no output: no warning)."""
    if not baselines or cand.stdout == baselines[0].stdout:
        return None
    if len(baselines) > 1 and baselines[1].stdout != baselines[0].stdout:
        return None
    old, new = baselines[0].stdout.splitlines(), cand.stdout.splitlines()
    i = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), None)
    if i is None:
        return f"the candidate printed {len(new)} lines, the baseline {len(old)}"
    return (
        f"the candidate printed something else than the baseline, from line {i + 1}: "
        f"{old[i][:120]!r} became {new[i][:120]!r}"
    )


def _fix_result(
    fix: PlannedFix,
    applied: bool,
    apply: bool,
    runs: list[Done],
    doc: OptimizeDocument,
) -> FixResult:
    kind = fix.kind
    runtime = apply and fix.has_runtime
    mode = "runtime" if runtime else "source" if fix.edits else "runtime"
    if not fix.applicable or (kind.opt_in and not fix.selected and not applied):
        mode = "suggestion"
    out = FixResult(
        id=fix.name,
        mode=mode,  # type: ignore[arg-type]
        applied=applied,
        reason=fix.reason,
        findings=list(dict.fromkeys(fix.findings)),
        sites=list(fix.sites),
        settings=dict(fix.settings),
        opt_in=kind.opt_in,
        gpu_only=kind.gpu_only,
        expected=kind.expected,
        notes=list(fix.notes),
        skipped=list(fix.skipped),
    )
    if applied:
        _measured_part(fix, out, runs, doc)
    return out


def _source_part(
    fix: PlannedFix, out: FixResult, runtime: bool, reads: dict[Path, bytes] | None
) -> None:
    if not fix.edits:
        return
    sources = SourceSet(reads=reads)
    for edit in fix.edits:
        try:
            rewrite = sources.rewrite(edit.path, edit.codemod)
        except GpuoptError as exc:
            out.skipped.append(str(exc))
            continue
        shown = sources.get(edit.path).shown
        out.skipped += [f"{shown}:{s.line}: {s.reason}" for s in rewrite.skipped]
    out.changes = [n for sf in sources.changed() for n in sf.notes]
    if not runtime:
        out.diff = unified_diff(sources.changed())


def _measured_part(
    fix: PlannedFix, out: FixResult, runs: list[Done], doc: OptimizeDocument
) -> None:
    labels = (f"only {fix.name}", f"only {fix.name} (again)")
    alone = [d for d in runs if d.result.label in labels and d.profile is not None]
    if alone:
        g = run_gain(timed(runs, "baseline"), alone, [fix], skip=fix.kind.settle_steps)
        if g.speedup is not None:
            g.stopped = "one run" if len(alone) == 1 else "confirmed"
        v = fix_verdict(_ok(runs, "baseline"), alone, [fix])
    elif doc.gain is not None and doc.verification is not None and _only(doc, fix):
        g, v = doc.gain, doc.verification
    else:
        g = Gain(speedup=None, label="not measured alone (--quick)")
        v = doc.verification or Verification(verified="not-run", detail="")
    if _gpu_gain_unmeasured(fix, doc):
        g = gpu_gain_here()
    if fix.kind.judged_by_memory:
        out.memory = _memory_change(runs, doc)
    out.gain_detail = g
    out.gain = g.speedup if g.measurable else None
    out.verified = v.verified
    if v.verified == "failed" and fix.equivalent_only:
        out.verified = "not-comparable"
        v = Verification(verified="not-comparable", detail=fix.notes[-1])
    if v.verified not in ("exact", "not-run") and v.detail:
        out.reason = f"{out.reason}; {v.detail}" if out.reason else v.detail


MEMORY_RUN = "candidate memory"  # gpuopt.commands.optimize's run of a fix judged by memory


def _memory_change(runs: list[Done], doc: OptimizeDocument) -> MemoryChange:
    """The step's peak in the baseline's profile against the candidate's memory run."""
    from gpuopt.optimize.measure.memory import memory_change

    run = next((d for d in runs if d.result.label == MEMORY_RUN), None)
    return memory_change(doc.baseline, run.profile if run is not None else None)


def gpu_gain_here(stopped: str | UnsetType = UNSET) -> Gain:
    """The gain of fixes whose gain is a GPU's, on a machine without one: whatever a CPU
    measured, not printed (a CPU's time says nothing of the launches or syncs it saves);
    ``stopped``: why the runs stopped all the same."""
    out = Gain(speedup=None, label="GPU-only gain, not measured here", verdict="not-measured")
    out.stopped = stopped
    return out


def _gpu_gain_unmeasured(fix: PlannedFix, doc: OptimizeDocument) -> bool:
    on_cpu = doc.baseline is not None and doc.baseline.environment.device != "cuda"
    return (fix.kind.gpu_only or fix.kind.gpu_gain) and on_cpu


def _only(doc: OptimizeDocument, fix: PlannedFix) -> bool:
    cands = [r for r in doc.runs if r.role == "candidate"]
    return bool(cands) and cands[0].fixes == [fix.name]
