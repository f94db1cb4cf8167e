"""Which fixes a profile calls for, and how each reaches the run: a pure function of the baseline
profile, the DataLoader sweep's measurement, the user's choice (``--fix``) and the source text.

A fix is planned when its finding is in the profile (or, for the fixes without a finding, when
the source shows the pattern: ``zero_grad(set_to_none=False)``); the default takes every planned
fix that is not opt-in. Opt-in fixes (they change numerics or the optimisation) are listed with
their reason, never applied silently.

Each fix plans itself (``plan(kind, inp)`` in its module or folder, on the types of
:mod:`gpuopt.fixes.planned`); :mod:`gpuopt.fixes.catalogue` lists every fix with its planner.
What stays here is what no one fix decides: which fixes are relevant and selected, the one
whole-step capture, and an opt-in fix asked by name on a script whose training framework has its
own setting for it.
"""

from __future__ import annotations

from gpuopt.fixes import framework_knobs, zero_grad
from gpuopt.fixes.catalogue import BY_NAME, CATALOGUE, PLANNERS
from gpuopt.fixes.kind import FixKind
from gpuopt.fixes.planned import PlanInput, PlannedFix, SourceEdit
from gpuopt.frameworks import Knob
from gpuopt.model.records import given
from gpuopt.units import site_line


def plan_fixes(inp: PlanInput) -> list[PlannedFix]:
    """Every fix of the catalogue that the profile or the user names, planned or refused."""
    found = {f.id for f in inp.profile.findings}
    out: list[PlannedFix] = []
    for kind in CATALOGUE:
        named = kind.name in inp.chosen
        relevant = named or bool(found & set(kind.findings)) or _pattern_in_source(kind, inp)
        if kind.name in ("padding", "padding-batch") and not named:
            relevant = kind.name in inp.loops  # the ragged finding names such a loop / loader
        if kind.name == "framework-knobs" and not named:  # a finding names a framework setting
            relevant = any(
                "knob" in f.evidence or f.id == "framework-bound" for f in inp.profile.findings
            )
        if kind.name == "syncs" and not named and relevant:  # a framework's reads are not its
            relevant = _pattern_in_source(kind, inp) or any(
                f.id in kind.findings and "library_sites" not in f.evidence
                for f in inp.profile.findings
            )
        if not relevant and not (kind.opt_in and inp.cuda and not kind.findings):
            continue
        fix = _plan_one(kind, inp)
        fix.selected = fix.applicable and (named or (not inp.chosen and not kind.opt_in))
        if kind.name == "aot" or (kind.name == "cuda-graphs" and not inp.cuda):
            fix.selected = fix.applicable and named
        out.append(fix)
    return _one_capture(out)


def _one_capture(fixes: list[PlannedFix]) -> list[PlannedFix]:
    """``aot`` captures the whole step as ``cuda-graphs`` does: the two never rewrite the same
    loop, the one named ``aot`` wins."""
    aot = next((f for f in fixes if f.name == "aot" and f.selected), None)
    graphs = next((f for f in fixes if f.name == "cuda-graphs" and f.selected), None)
    if aot is not None and graphs is not None:
        graphs.selected = False
        graphs.reason = "the aot fix captures the whole step already"
    return fixes


def _pattern_in_source(kind: FixKind, inp: PlanInput) -> bool:
    return kind.name == "zero-grad" and bool(zero_grad.zero_grad_lines(inp))


def _plan_one(kind: FixKind, inp: PlanInput) -> PlannedFix:
    if kind.name in ("aot", "cuda-graphs"):  # a CPU run checks their rewrite; no framework form
        return PLANNERS[kind.name](kind, inp)
    if kind.gpu_only and not inp.cuda:
        return PlannedFix(kind, False, False, "GPU-only: this run had no CUDA device")
    through = None if kind.own_framework_form else _through_framework(kind, inp)
    if through is not None:
        return through
    planner = PLANNERS.get(kind.name)
    if planner is None:
        return PlannedFix(kind, False, False, "no planner")
    fix = planner(kind, inp)
    flag = _framework_flag(kind, inp)
    if flag is not None:
        fix.notes.append(flag)
    return fix


def _through_framework(kind: FixKind, inp: PlanInput) -> PlannedFix | None:
    """An opt-in fix asked by name on a script that trains through a framework with its own
    setting for it (``--fix amp`` under the HF Trainer: ``TrainingArguments(bf16=True)``):
    that setting, set where the script sets the framework's settings, in place of gpuopt's
    run-time form. None where the framework has no such setting."""
    fw = given(inp.profile.framework)
    if not kind.opt_in or fw is None:
        return None
    knob = _framework_knob(fw.name, kind.name)
    site = fw.settings_at.get(knob.call) if knob is not None else None
    parsed = site_line(site) if site else None
    if knob is None or parsed is None:
        return None
    settings = {knob.argument: knob.value}
    fix = PlannedFix(kind, False, True, f"through {fw.name}: {knob.call}({knob.argument}=")
    fix.reason += f"{knob.value}) at {site}, where the script sets it ({knob.evidence})"
    if kind.name not in inp.chosen:
        fix.reason += f"; it changes the training: only with --fix {kind.name}"
    fix.sites, fix.settings = [str(site)], dict(settings)
    fix.edits = [
        SourceEdit(
            parsed[0],
            [parsed[1]],
            framework_knobs.framework_codemod(parsed[1], knob.call, settings),
        )
    ]
    return fix


def _framework_knob(framework: str, fix: str) -> Knob | None:
    """The framework's own setting that is the fix ``fix`` (its knob whose ``finding`` names
    the fix: ``amp`` under the HF Trainer is ``TrainingArguments(bf16=True)``), else None."""
    from gpuopt.frameworks.detect import spec_named

    spec = spec_named(framework)
    return next((k for k in spec.knobs if k.finding == fix), None) if spec else None


def _framework_flag(kind: FixKind, inp: PlanInput) -> str | None:
    """A framework whose setting for the fix is a command-line flag (timm's ``train.py``:
    ``--amp``): the flag, said (gpuopt does not rewrite a command line)."""
    fw = given(inp.profile.framework)
    knob = _framework_knob(fw.name, kind.name) if fw is not None else None
    if fw is None or knob is None or not knob.argument.startswith("-"):
        return None
    value = f" {knob.value}" if knob.value else ""
    return (
        f"{fw.name}'s own form of it is the flag {knob.argument}{value} on the command line "
        f"({knob.evidence}); gpuopt does not rewrite a command line"
    )


__all__ = ["BY_NAME", "PlanInput", "PlannedFix", "SourceEdit", "plan_fixes"]
