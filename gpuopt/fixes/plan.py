"""Which fixes a profile calls for, and how each reaches the run: a pure function of the baseline
profile, the DataLoader sweep's measurement, the user's choice (``--fix``) and the source text.

A fix is planned when its finding is in the profile (or, for the fixes without a finding, when
the source shows the pattern: ``zero_grad(set_to_none=False)``); the default takes every planned
fix that is not opt-in. Opt-in fixes (they change numerics or the optimisation) are listed with
their reason, never applied silently.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuopt.debug import logger
from gpuopt.fixes.catalogue import BY_NAME, CATALOGUE, FixKind
from gpuopt.fixes.dataloader.sweep import PERSISTENT_KEPT, PERSISTENT_NOTE, SweepResult
from gpuopt.fixes.loops.plan import CHECKED, LoopPlan
from gpuopt.fixes.whole_step.aot_check import AotSummary
from gpuopt.frameworks import Knob
from gpuopt.model.optimize import LoaderSettings
from gpuopt.model.profile import Finding, Profile
from gpuopt.model.records import given
from gpuopt.source import Rewrite
from gpuopt.units import site_line

log = logger(__name__)

Codemod = Callable[[str, str], Rewrite]  # (text, name shown) -> what it did


@dataclass
class SourceEdit:
    """One codemod on one file."""

    path: str  # as in the profile's sites (relative to the working directory)
    lines: list[int]
    codemod: Codemod


@dataclass
class PlannedFix:
    kind: FixKind
    selected: bool  # the run uses it (default or --fix)
    applicable: bool  # the profile calls for it and it can be applied here
    reason: str
    findings: list[str] = field(default_factory=list)
    sites: list[str] = field(default_factory=list)
    loaders: list[LoaderSettings] = field(default_factory=list)
    non_blocking_sites: list[str] = field(default_factory=list)
    backend_flags: dict[str, bool] = field(default_factory=dict)
    edits: list[SourceEdit] = field(default_factory=list)
    model_transforms: list[str] = field(default_factory=list)
    settings: dict[str, int | float | bool | str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the user should know besides
    skipped: list[str] = field(default_factory=list)  # "path:line: why it was left alone"
    # the fix makes the training equivalent, not identical (a Dataset's random draws in workers)
    equivalent_only: bool = False

    @property
    def name(self) -> str:
        return self.kind.name

    @property
    def has_runtime(self) -> bool:
        return bool(
            self.loaders or self.non_blocking_sites or self.backend_flags or self.model_transforms
        )


@dataclass
class PlanInput:
    profile: Profile
    chosen: list[str]  # --fix NAME, in order; empty: the default
    cuda: bool
    script_text: str | None  # the script's source (None for -m MODULE)
    script_path: str | None
    sweep: SweepResult | None = None
    sweep_error: str | None = None
    aot: AotSummary | None = None
    aot_error: str | None = None
    loops: dict[str, LoopPlan] = field(default_factory=dict)  # the loop fixes' plans
    amp_dtype: str = "bf16"  # --fix amp: "bf16", or "fp16" with loss scaling


def _on_lines(codemod: Callable[..., Rewrite], lines: list[int]) -> Codemod:
    """A codemod taking ``(source, lines, name=...)`` bound to ``lines``."""

    def run(text: str, name: str) -> Rewrite:
        return codemod(text, lines, name=name)

    return run


def _flags_codemod(text: str, name: str, flags: dict[str, bool]) -> Rewrite:
    from gpuopt.fixes.backend_flags import rewrite_backend_flags

    return rewrite_backend_flags(text, flags, name=name)


def by_file(sites: list[str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for s in sites:
        parsed = site_line(s)
        if parsed is not None:
            out.setdefault(parsed[0], []).append(parsed[1])
    return {p: sorted(set(v)) for p, v in out.items()}


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
    return kind.name == "zero-grad" and bool(_zero_grad_lines(inp))


def _plan_one(kind: FixKind, inp: PlanInput) -> PlannedFix:
    if kind.name == "aot":
        return _plan_aot(kind, inp)
    if kind.name == "cuda-graphs":
        return _plan_cuda_graphs(kind, inp)
    if kind.gpu_only and not inp.cuda:
        return PlannedFix(kind, False, False, "GPU-only: this run had no CUDA device")
    through = _through_framework(kind, inp)
    if through is not None:
        return through
    planner = _PLANNERS.get(kind.name)
    if planner is None:
        return PlannedFix(kind, False, False, "no planner")
    fix = planner(kind, inp)
    flag = _framework_flag(kind, inp)
    if flag is not None:
        fix.notes.append(flag)
    return fix


def _findings(profile: Profile, ids: tuple[str, ...]) -> list[Finding]:
    return [f for f in profile.findings if f.id in ids]


def _plan_dataloader(kind: FixKind, inp: PlanInput) -> PlannedFix:
    found = _findings(inp.profile, kind.findings)
    site = next((f.site for f in found if f.site), None)
    fix = PlannedFix(kind, False, False, "", findings=[f.id for f in found])
    if site is None:
        fix.reason = "the finding names no DataLoader(...) line"
        return fix
    fix.sites = [site]
    if inp.sweep is None:
        fix.reason = f"the DataLoader sweep did not run: {inp.sweep_error or 'not asked'}"
        return fix
    best = inp.sweep.best
    if best.num_workers == inp.sweep.baseline.num_workers and not best.persistent_workers:
        fix.reason = f"the sweep found no faster setting ({inp.sweep.note})"
        return fix
    settings = LoaderSettings(
        site=site,
        num_workers=best.num_workers,
        persistent_workers=best.persistent_workers or None if best.num_workers > 0 else None,
        prefetch_factor=best.prefetch_factor if best.num_workers > 0 else None,
        pin_memory=True if inp.cuda else None,
    )
    fix.loaders = [settings]
    fix.settings = dict(settings.knobs())
    fix.applicable = True
    kept = ", persistent_workers=True" if best.persistent_workers else ""
    fix.reason = (
        f"the sweep timed the DataLoader alone: {best.batches_per_s:.1f} batches/s with "
        f"num_workers={best.num_workers}{kept} against {inp.sweep.baseline.batches_per_s:.1f} "
        f"with the script's num_workers={inp.sweep.baseline.num_workers} "
        f"({inp.sweep.speedup:.2f}x; {inp.sweep.note})"
    )
    fix.edits = _loader_edits(site, settings)
    fix.notes.append(PERSISTENT_KEPT if best.persistent_workers else PERSISTENT_NOTE)
    fix.equivalent_only = best.persistent_workers
    if inp.sweep.same_batches is False:
        fix.equivalent_only = True
        fix.notes.append(
            "the first batches differ with workers: the Dataset draws random numbers, which in "
            "worker processes come from per-worker seeds (equivalent training, not identical)"
        )
    return fix


def _loader_edits(site: str, settings: LoaderSettings) -> list[SourceEdit]:
    from gpuopt.fixes.dataloader.codemod import rewrite_dataloader

    parsed = site_line(site)
    if parsed is None:
        return []
    knobs = settings.knobs()

    def codemod(text: str, name: str) -> Rewrite:
        return rewrite_dataloader(text, [parsed[1]], knobs, name=name)

    return [SourceEdit(parsed[0], [parsed[1]], codemod)]


def _plan_copies(kind: FixKind, inp: PlanInput) -> PlannedFix:
    from gpuopt.fixes.pinned_copies import rewrite_copies

    found = _findings(inp.profile, kind.findings)
    sites = sorted({t.site for t in inp.profile.transfers if t.site and t.direction == "h2d"})
    fix = PlannedFix(kind, False, bool(sites), "", findings=[f.id for f in found], sites=sites)
    if not sites:
        fix.reason = "no host-to-device copy with a site in the profile"
        return fix
    fix.reason = "copies from pageable memory or blocking copies at " + ", ".join(sites)
    fix.non_blocking_sites = sites
    fix.settings = {"non_blocking": True, "pin_memory": True}
    for path, lines in by_file(sites).items():
        fix.edits.append(SourceEdit(path, lines, _on_lines(rewrite_copies, lines)))
    train = [d for d in given(inp.profile.dataloaders) or [] if given(d.role) != "eval"]
    for d in train:
        at = given(d.built_at) or d.site
        if at and not d.pin_memory:
            settings = LoaderSettings(site=at, pin_memory=True)
            fix.loaders.append(settings)
            fix.edits += _loader_edits(at, settings)
    return fix


def _plan_syncs(kind: FixKind, inp: PlanInput) -> PlannedFix:
    from gpuopt.fixes.syncs.codemod import rewrite_syncs

    # a framework's own reads are changed through its setting (framework-knobs), never here
    found = [f for f in _findings(inp.profile, kind.findings) if "library_sites" not in f.evidence]
    sites: list[str] = []
    for f in found:
        listed = f.evidence.get("sites")
        sites += list(listed) if isinstance(listed, dict) else ([f.site] if f.site else [])
    fix = PlannedFix(kind, False, bool(sites), "", findings=[f.id for f in found])
    fix.sites = sorted(set(sites))
    if not sites:
        fix.reason = "no per-step sync with a site in the profile"
        return fix
    fix.reason = "per-step host syncs at " + ", ".join(fix.sites)
    for path, lines in by_file(fix.sites).items():
        fix.edits.append(SourceEdit(path, lines, _on_lines(rewrite_syncs, lines)))
    return fix


def _plan_framework_knobs(kind: FixKind, inp: PlanInput) -> PlannedFix:
    """The framework's settings the findings name, each set on the user's call that sets the
    framework's settings: a finding's ``evidence.knob`` (``TrainingArguments(...)``), one that
    changes the training only when the fix is named; the ``framework-bound`` finding's
    ``fix_params`` at its site (``Trainer(enable_progress_bar=False)``). A framework whose knobs
    are command-line flags (timm's ``train.py``) gets no edit: the finding's fix names them."""
    found = [
        f
        for f in _findings(inp.profile, kind.findings)
        if "knob" in f.evidence or f.id == "framework-bound"
    ]
    fix = PlannedFix(kind, False, False, "", findings=[f.id for f in found])
    calls: dict[tuple[str, str], dict[str, str]] = {}
    for f in found:
        if f.id == "framework-bound":
            _bound_settings(f, fix, calls)
        else:
            _knob_setting(f, kind, inp, fix, calls)
    for (site, call), settings in calls.items():
        parsed = site_line(site)
        if parsed is None:
            continue
        fix.sites.append(site)
        fix.settings.update(settings)
        fix.edits.append(
            SourceEdit(parsed[0], [parsed[1]], _framework_codemod(parsed[1], call, settings))
        )
    fix.applicable = bool(fix.edits)
    fix.reason = (
        "the framework's own setting, where the script sets it: "
        + "; ".join(
            f"{call}({', '.join(f'{k}={v}' for k, v in s.items())}) at {site}"
            for (site, call), s in calls.items()
        )
        if fix.edits
        else "no framework setting named by a finding can be set in the script"
        + "".join(f"; {note}" for note in fix.skipped)
    )
    return fix


def _knob_setting(
    f: Finding,
    kind: FixKind,
    inp: PlanInput,
    fix: PlannedFix,
    calls: dict[tuple[str, str], dict[str, str]],
) -> None:
    """A finding's ``evidence.knob``, added to ``calls`` by its settings call's site."""
    knob = f.evidence["knob"]
    site = knob.get("site") if isinstance(knob, dict) else None
    if not isinstance(knob, dict) or not site:
        fix.skipped.append(f"{f.site}: {f.title}: the script's settings call was not found")
        return
    named_by = str(knob.get("finding", "")) if knob.get("finding") in BY_NAME else kind.name
    if knob.get("changes_training") and named_by not in inp.chosen:
        fix.notes.append(
            f"{knob['call']}({knob['argument']}={knob['value']}) changes the training: "
            f"ask for it with --fix {named_by}"
        )
        return
    calls.setdefault((str(site), str(knob["call"])), {})[str(knob["argument"])] = str(knob["value"])


def _bound_settings(
    f: Finding, fix: PlannedFix, calls: dict[tuple[str, str], dict[str, str]]
) -> None:
    """The framework-bound finding's knobs (its ``fix_params`` past ``call`` and ``framework``),
    added to ``calls`` at its site, the settings call (``Trainer(...)``)."""
    params = dict(given(f.fix_params) or {})
    callee = params.pop("call", None)
    framework = params.pop("framework", "the framework")
    if callee is None or not f.site or not params:
        fix.skipped.append(f"{framework}: no settings call to rewrite ({f.fix})")
        return
    calls.setdefault((f.site, callee), {}).update(params)


def _through_framework(kind: FixKind, inp: PlanInput) -> PlannedFix | None:
    """An opt-in fix asked by name on a script that trains through a framework with its own
    setting for it (``--fix amp`` under the HF Trainer: ``TrainingArguments(bf16=True)``):
    that setting, set where the script sets the framework's settings, in place of gpuopt's
    run-time form. None where the framework has no such setting."""
    fw = given(inp.profile.framework)
    if not kind.opt_in or fw is None:
        return None
    knob = framework_knob(fw.name, kind.name)
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
        SourceEdit(parsed[0], [parsed[1]], _framework_codemod(parsed[1], knob.call, settings))
    ]
    return fix


def framework_knob(framework: str, fix: str) -> Knob | None:
    """The framework's own setting that is the fix ``fix`` (its knob whose ``finding`` names
    the fix: ``amp`` under the HF Trainer is ``TrainingArguments(bf16=True)``), else None."""
    from gpuopt.frameworks.detect import spec_named

    spec = spec_named(framework)
    return next((k for k in spec.knobs if k.finding == fix), None) if spec else None


def _framework_flag(kind: FixKind, inp: PlanInput) -> str | None:
    """A framework whose setting for the fix is a command-line flag (timm's ``train.py``:
    ``--amp``): the flag, said (gpuopt does not rewrite a command line)."""
    fw = given(inp.profile.framework)
    knob = framework_knob(fw.name, kind.name) if fw is not None else None
    if fw is None or knob is None or not knob.argument.startswith("-"):
        return None
    value = f" {knob.value}" if knob.value else ""
    return (
        f"{fw.name}'s own form of it is the flag {knob.argument}{value} on the command line "
        f"({knob.evidence}); gpuopt does not rewrite a command line"
    )


def _plan_accumulation(kind: FixKind, inp: PlanInput) -> PlannedFix:
    """Gradient accumulation has no form outside a framework's setting (planned through it by
    :func:`_through_framework`): a plain loop's accumulation is a change of its loop."""
    return PlannedFix(
        kind,
        False,
        False,
        "only through a training framework's own setting (TrainingArguments("
        "gradient_accumulation_steps=...), Lightning's Trainer(accumulate_grad_batches=...)): "
        "this run's script sets none",
    )


def _framework_codemod(line: int, call: str, settings: dict[str, str]) -> Codemod:
    def run(text: str, name: str) -> Rewrite:
        from gpuopt.fixes.framework_knobs import rewrite_framework_call

        return rewrite_framework_call(text, line, call, settings, name=name)

    return run


def _plan_graph_breaks(kind: FixKind, inp: PlanInput) -> PlannedFix:
    """Graph breaks at a print, a logging call or an .item() read: moved to the end of their
    compiled function (:mod:`gpuopt.fixes.graph_breaks`)."""
    from gpuopt.fixes.graph_breaks import MOVABLE_KINDS, rewrite_graph_breaks

    found = _findings(inp.profile, kind.findings)
    movable = [f for f in found if f.evidence.get("kind") in MOVABLE_KINDS and f.site]
    fix = PlannedFix(kind, False, bool(movable), "", findings=[f.id for f in found])
    fix.sites = sorted({f.site for f in movable if f.site})
    if not movable:
        fix.reason = "no graph break at a print, logging call or .item() with a site"
        return fix
    fix.reason = "graph breaks at logging lines: " + ", ".join(fix.sites)
    for path, lines in by_file(fix.sites).items():
        fix.edits.append(SourceEdit(path, lines, _on_lines(rewrite_graph_breaks, lines)))
    return fix


def _plan_fused_ops(kind: FixKind, inp: PlanInput) -> PlannedFix:
    """The hand-written op chains the findings name, each replaced by torch's one op."""
    from gpuopt.fixes.fused_ops import rewrite_hand_written_ops

    found = [f for f in _findings(inp.profile, kind.findings) if f.site]
    fix = PlannedFix(kind, False, False, "", findings=[f.id for f in found])
    fix.sites = sorted({f.site for f in found if f.site})
    if not fix.sites:
        fix.reason = "no hand-written op chain with a site in the profile"
        return fix
    fix.applicable = True
    fix.reason = "hand-written op chains at " + ", ".join(fix.sites)
    for path, lines in by_file(fix.sites).items():
        fix.edits.append(SourceEdit(path, lines, _on_lines(rewrite_hand_written_ops, lines)))
    return fix


def _zero_grad_lines(inp: PlanInput) -> list[int]:
    if inp.script_text is None:
        return []
    from gpuopt.fixes.zero_grad import find_zero_grad_false
    from gpuopt.source import CodemodError

    try:
        return find_zero_grad_false(inp.script_text)
    except CodemodError as exc:
        log.debug("zero_grad calls not read: %s", exc)
        return []


def _plan_zero_grad(kind: FixKind, inp: PlanInput) -> PlannedFix:
    from gpuopt.fixes.zero_grad import rewrite_zero_grad

    lines = _zero_grad_lines(inp)
    fix = PlannedFix(kind, False, bool(lines), "")
    if not lines or inp.script_path is None:
        fix.reason = "no zero_grad(set_to_none=False) in the script"
        return fix
    path = inp.script_path
    fix.sites = [f"{path}:{n}" for n in lines]
    fix.reason = "gradients are zero-filled every step instead of freed"
    fix.edits = [SourceEdit(path, lines, _on_lines(rewrite_zero_grad, lines))]
    return fix


def _plan_flags(flags: dict[str, bool], why: str) -> Callable[[FixKind, PlanInput], PlannedFix]:
    def planner(kind: FixKind, inp: PlanInput) -> PlannedFix:
        fix = PlannedFix(kind, False, True, why, backend_flags=dict(flags))
        fix.settings = {k: v for k, v in flags.items()}
        if inp.script_path is not None:
            path = inp.script_path
            fix.edits = [SourceEdit(path, [], functools.partial(_flags_codemod, flags=flags))]
        return fix

    return planner


def _plan_model(kind: FixKind, inp: PlanInput) -> PlannedFix:
    """The opt-in model fixes: a run-time transform of the model after its first step, and
    (compile, channels-last) one statement after the line that builds its optimizer."""
    from gpuopt.fixes.model_transforms.codemod import (
        channels_last_statement,
        compile_statement,
    )

    transform = kind.transform
    what = kind.what
    if kind.name == "amp" and inp.amp_dtype == "fp16":
        transform = "fp16_autocast"
        what = (
            "the model's forward under fp16 autocast, its outputs back in float32, the loss "
            "scaled by a GradScaler"
        )
    fix = PlannedFix(kind, False, True, f"opt-in: {what}")
    fix.model_transforms = [transform]
    fix.settings = {"transform": transform}
    make = {"compile": compile_statement, "channels_last": channels_last_statement}.get(transform)
    if make is not None and inp.script_path is not None:
        fix.edits = [
            SourceEdit(inp.script_path, [], functools.partial(_after_optimizer, make=make))
        ]
    if transform == "bf16_autocast":
        fix.notes.append(
            "no source form yet: in your code, run the forward under "
            "torch.autocast(device_type, dtype=torch.bfloat16) and compute the loss in float32"
        )
    elif transform == "fp16_autocast":
        fix.notes.append(
            "no source form yet: in your code, run the forward under torch.autocast(device_type, "
            "dtype=torch.float16), then scaler = torch.amp.GradScaler(device_type); "
            "scaler.scale(loss).backward(); scaler.unscale_(optimizer) before clipping; "
            "scaler.step(optimizer); scaler.update()"
        )
    return fix


def _after_optimizer(text: str, name: str, make: Callable[[str], str]) -> Rewrite:
    from gpuopt.fixes.model_transforms.codemod import rewrite_after_optimizer

    return rewrite_after_optimizer(text, make, name=name)


def _plan_cudnn(kind: FixKind, inp: PlanInput) -> PlannedFix:
    ragged = given(inp.profile.ragged)
    if ragged is not None and any(r.distinct_shapes > 1 for r in given(ragged.loaders) or []):
        return PlannedFix(kind, False, False, "input shapes vary from batch to batch")
    return _plan_flags({"torch.backends.cudnn.benchmark": True}, "the input shapes are static")(
        kind, inp
    )


def _whole_step(
    kind: FixKind, inp: PlanInput, forward: str | None = None
) -> tuple[PlannedFix, str | None]:
    """The cuda-graphs codemod on the script: the fix with its edit and notes, or why not."""
    from gpuopt.fixes.whole_step.codemod import rewrite_cuda_graphs
    from gpuopt.source import CodemodError

    found = [f.id for f in _findings(inp.profile, kind.findings)]
    fix = PlannedFix(kind, False, False, "", findings=found)
    if inp.script_text is None or inp.script_path is None:
        return fix, "the training loop is read from a script, not from -m MODULE, so far"
    path = inp.script_path
    try:
        r = rewrite_cuda_graphs(inp.script_text, name=path, forward=forward)
    except CodemodError as exc:
        return fix, str(exc)
    fix.skipped = [f"{path}:{s.line}: {s.reason}" for s in r.skipped]
    if not r.changed:
        return fix, (
            "no training step of the script can be captured: see what was left alone"
            if r.skipped
            else "no training loop in the script (a backward and an optimizer step in a loop)"
        )
    fix.sites = [f"{path}:{n.split(':')[0].split()[-1]}" for n in r.notes]

    def codemod(text: str, name: str) -> Rewrite:
        return rewrite_cuda_graphs(text, name=name, forward=forward)

    fix.edits = [SourceEdit(path, [], codemod)]
    fix.applicable = True
    return fix, None


def _where(inp: PlanInput) -> str:
    return (
        "the runs measure it on this GPU"
        if inp.cuda
        else "GPU-only: without a CUDA device the rewritten step runs as written, so the runs "
        "check that the training is the same; its gain is a GPU's, not measured here"
    )


def _plan_cuda_graphs(kind: FixKind, inp: PlanInput) -> PlannedFix:
    """``cuda-graphs``: the training step captured whole (a source fix); on a machine without
    a GPU only when named (then the runs prove the rewrite trains the same)."""
    fix, why = _whole_step(kind, inp)
    if why is not None:
        fix.reason = why
        return fix
    fix.reason = f"the whole training step captured in one CUDA graph; {_where(inp)}"
    if not inp.cuda and kind.name not in inp.chosen:
        fix.applicable = False
        fix.reason = (
            "GPU-only: this run had no CUDA device; the step can be captured (ask with "
            "--fix cuda-graphs to check the rewrite here)"
        )
    return fix


def _plan_aot(kind: FixKind, inp: PlanInput) -> PlannedFix:
    """``--fix aot`` on a training script: the whole step captured in one CUDA graph (the
    cuda-graphs rewrite), the model's forward through Nimble's multi-stream plan where the cost
    model promises enough over one stream and the plan's CPU proof passed. Per-part graphs (a
    copy of every parameter and saved activation a step, the backward's capture in the measured
    steps) are 7.5x slower on an H200 (docs/optimize.md): where the step cannot be captured
    whole, it is not offered, with the reason."""
    from gpuopt.aot.choice import MIN_ESTIMATED_GAIN

    if "aot" not in inp.chosen:
        return PlannedFix(
            kind,
            False,
            False,
            "ask for it with --fix aot (it captures the step); see gpuopt schedule",
        )
    summary = inp.aot
    nimble = (
        summary is not None
        and summary.equal_outputs
        and summary.checks_passed
        and summary.est_over_graph >= MIN_ESTIMATED_GAIN
    )
    fix, why = _whole_step(kind, inp, "aot" if nimble else None)
    says = summary.says() if summary is not None else f"no AoT plan: {inp.aot_error or 'not run'}"
    if why is not None:
        fix.reason = (
            f"not offered for training: the AoT fix on a training script is the whole step "
            f"captured in one CUDA graph, and {why[0].lower()}{why[1:]} ({says})"
        )
        return fix
    if nimble:
        forward = "its forward through Nimble's multi-stream plan"
    elif summary is not None and summary.equal_outputs and summary.checks_passed:
        forward = (
            f"its forward captured as the model runs it (Nimble's plan is estimated "
            f"{summary.est_over_graph:.2f}x over one stream, below the {MIN_ESTIMATED_GAIN}x "
            "the cost model must promise)"
        )
    else:
        forward = "its forward captured as the model runs it (Nimble's plan not proven)"
    fix.reason = f"the whole training step captured in one CUDA graph, {forward}; {_where(inp)}"
    fix.notes.append(says)
    if summary is not None:
        fix.settings = {"streams": summary.streams, "est_over_graph": summary.est_over_graph}
    return fix


def _loop_codemod(plan: LoopPlan, lines: list[int], anchors: dict[int, str]) -> Codemod:
    def run(text: str, name: str) -> Rewrite:
        return plan.codemod(text, lines, name, anchors)

    return run


def _plan_loops(kind: FixKind, inp: PlanInput) -> PlannedFix:
    """``vectorize`` / ``padding``: the loops whose rewrite passed its check on the run's own
    inputs; every other loop named by a finding is listed with why it was left alone."""
    found = _findings(inp.profile, kind.findings)
    plan = inp.loops.get(kind.name)
    fix = PlannedFix(kind, False, False, "", findings=[f.id for f in found])
    if plan is None or not plan.rewrites:
        why = plan.error if plan is not None and plan.error else None
        fix.reason = why or (
            "no loop of the findings to rewrite"
            if kind.name == "vectorize"
            else "no per-sample loop inside the step in the findings"
        )
        return fix
    checked = 0
    for path, rewrite in plan.rewrites.items():
        fix.skipped += [f"{path}:{s.line}: {s.reason}" for s in rewrite.skipped]
        ok: list[int] = []
        for change in getattr(rewrite, "changes", []):
            result = plan.result(path, change.line)
            fix.sites.append(f"{path}:{change.line}")
            if result is not None and result.verdict in CHECKED:
                ok.append(change.line)
                fix.notes.append(f"{path}:{change.line}: {change.pattern}: {result.says()}")
                continue
            says = result.says() if result is not None else f"not checked ({plan.error})"
            fix.skipped.append(f"{path}:{change.line}: {change.pattern} rewrite not used: {says}")
        if ok:
            checked += len(ok)
            anchors = plan.anchors.get(path, {})
            fix.edits.append(SourceEdit(path, ok, _loop_codemod(plan, ok, anchors)))
    fix.applicable = bool(fix.edits)
    fix.reason = (
        f"{checked} loop(s) rewritten, each checked on the inputs of its first run in the "
        "script (old and new code side by side)"
        if checked
        else "no loop could be rewritten safely: see what was left alone and why"
    )
    return fix


def _padding_batch(
    text: str, name: str, loader: int, loop: int, anchors: dict[int, str], size: int
) -> Rewrite:
    from gpuopt.fixes.loops.padding_batch import rewrite_padding_batch

    return rewrite_padding_batch(text, loader, loop, size, name=name, anchors=anchors)


def _plan_padding_batch(kind: FixKind, inp: PlanInput) -> PlannedFix:
    """The opt-in padding-batch: its diff is always shown when the profile calls for it."""
    from gpuopt.fixes.loops.padding_batch import DEFAULT_BATCH

    found = _findings(inp.profile, kind.findings)
    plan = inp.loops.get(kind.name)
    fix = PlannedFix(kind, False, False, "", findings=[f.id for f in found])
    if plan is None or not plan.rewrites:
        fix.reason = (plan.error if plan is not None else None) or (
            "no training DataLoader ran at batch size 1 with variable-size samples"
        )
        return fix
    for path, rewrite in plan.rewrites.items():
        fix.skipped += [f"{path}:{s.line}: {s.reason}" for s in rewrite.skipped]
        if not rewrite.changed:
            continue
        loader, loop = plan.lines[path]
        anchors = plan.anchors.get(path, {})
        fix.sites += [f"{path}:{loader}", f"{path}:{loop}"]

        codemod = functools.partial(
            _padding_batch, loader=loader, loop=loop, anchors=anchors, size=DEFAULT_BATCH
        )
        fix.edits.append(SourceEdit(path, [loader, loop], codemod))
    fix.applicable = bool(fix.edits)
    fix.settings = {"batch_size": DEFAULT_BATCH}
    fix.reason = (
        f"opt-in: {kind.what}; changes the optimisation, so it is compared on the loss after "
        "the same number of samples, never step for step"
        if fix.applicable
        else "the DataLoader or its loop is not one gpuopt rewrites: see what was left alone"
    )
    return fix


def _plan_batch_size(kind: FixKind, inp: PlanInput) -> PlannedFix:
    """``--fix batch-size`` (gpuopt.fixes.batch_size): the DataLoader's batch size."""
    from gpuopt.fixes.batch_size import LR_NOTE, choose_batch_size

    choice = choose_batch_size(inp.profile)
    found = [f.id for f in _findings(inp.profile, kind.findings)]
    fix = PlannedFix(kind, False, choice.applicable, choice.reason, findings=found)
    if choice.site is None:
        return fix
    settings = LoaderSettings(site=choice.site, batch_size=choice.batch_size)
    fix.loaders, fix.sites = [settings], [choice.site]
    fix.settings = {"batch_size": choice.batch_size}
    fix.edits = _loader_edits(choice.site, settings)
    fix.notes.append(LR_NOTE)
    return fix


_PLANNERS: dict[str, Callable[[FixKind, PlanInput], PlannedFix]] = {
    "accumulation": _plan_accumulation,
    "batch-size": _plan_batch_size,
    "vectorize": _plan_loops,
    "padding": _plan_loops,
    "padding-batch": _plan_padding_batch,
    "dataloader": _plan_dataloader,
    "pinned-copies": _plan_copies,
    "syncs": _plan_syncs,
    "framework-knobs": _plan_framework_knobs,
    "graph-breaks": _plan_graph_breaks,
    "zero-grad": _plan_zero_grad,
    "fused-ops": _plan_fused_ops,
    "cudnn-benchmark": _plan_cudnn,
    "amp": _plan_model,
    "channels-last": _plan_model,
    "compile": _plan_model,
    "tf32": _plan_flags(
        {"torch.backends.cuda.matmul.allow_tf32": True, "torch.backends.cudnn.allow_tf32": True},
        "float32 matmuls and convolutions in TF32 (opt-in: changes numerics)",
    ),
}

__all__ = ["BY_NAME", "PlanInput", "PlannedFix", "SourceEdit", "plan_fixes"]
