"""The analyses ``gpuopt optimize`` runs in child processes before it plans, and when: the
DataLoader sweep (a ``dataloader-bound`` finding whose DataLoader line is known, and the
dataloader fix wanted: the default, or ``--fix dataloader``), and the AoT analysis (only with
``--fix aot``: it captures the model), and the check of the loop rewrites (``vectorize``,
``padding``) on the run's own inputs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuopt.errors import GpuoptError
from gpuopt.model.profile import Profile

if TYPE_CHECKING:
    from gpuopt.fixes.dataloader.sweep import SweepResult
    from gpuopt.fixes.whole_step.aot_check import AotSummary
    from gpuopt.optimize.options import OptimizeOptions
    from gpuopt.optimize.run.progress import Phases


def sweep_for(
    opts: OptimizeOptions, base: Profile, out: Path, phases: Phases
) -> tuple[SweepResult | None, str | None]:
    """The sweep's result, or why there is none (None, None: no sweep was called for)."""
    if opts.fixes and "dataloader" not in opts.fixes:
        return None, None
    finding = next((f for f in base.findings if f.id == "dataloader-bound"), None)
    if finding is None:
        return None, None
    if finding.site is None:
        return None, "the finding names no DataLoader(...) line"
    if opts.script is None:
        return None, "the sweep runs scripts, not -m MODULE targets, so far"
    from gpuopt.fixes.dataloader.sweep import run_sweep

    phases.phase(f"sweeping DataLoader settings at {finding.site}")
    compute = compute_s(base)
    need = 1.0 / compute if compute else None
    epochs = _epochs_seen(base, finding.site)
    try:
        sweep = run_sweep(
            opts.script,
            list(opts.args),
            finding.site,
            out / "sweep.json",
            need=need,
            epochs=epochs > 1,
        )
        return sweep, None
    except GpuoptError as exc:
        return None, str(exc)


def compute_s(base: Profile) -> float | None:
    """The training's compute a step on a core of its own: the median step less its data wait,
    less the share its threads waited for a core (``utilization.cpu.run_delay_share``, the
    kernel's count). A busy machine stretches the compute's wall time, not a sleeping loader's
    wait: from the wall clock, the sweep's pick moved with the neighbours' load (the longer the
    compute, the less the loading it overlaps seems worth); from this it does not. None: no
    steps."""
    from gpuopt.model.records import given

    step = base.steps.time_s.median
    if not step:
        return None
    delay = given(base.utilization.cpu.run_delay_share)
    busy = float(delay) if isinstance(delay, (int, float)) and 0.0 <= delay < 1.0 else 0.0
    return step * (1.0 - base.breakdown.data_wait) * (1.0 - busy)


def _epochs_seen(base: Profile, site: str) -> int:
    """How many times the run started the DataLoader built at ``site`` (its epochs)."""
    from gpuopt.model.records import given

    loaders = given(base.dataloaders) or []
    return max((d.epochs for d in loaders if site in (given(d.built_at), d.site)), default=0)


def aot_for(
    opts: OptimizeOptions, out: Path, phases: Phases
) -> tuple[AotSummary | None, str | None]:
    """Nimble's plan of the script's model, its CPU proof and its estimate, or why there is
    none (None, None: not asked for)."""
    if "aot" not in opts.fixes:
        return None, None
    if opts.script is None:
        return None, "the AoT analysis runs scripts, not -m MODULE targets, so far"
    from gpuopt.fixes.whole_step.aot_check import run_aot_check

    phases.phase("planning the model's streams (AoT)")
    try:
        return run_aot_check(opts.script, list(opts.args), out / "aot.json"), None
    except GpuoptError as exc:
        return None, str(exc)


def loops_for(opts: OptimizeOptions, base: Profile, out: Path, phases: Phases) -> dict[str, Any]:
    """The loop fixes' plans (:class:`~gpuopt.fixes.loops.plan.LoopPlan` by fix name): the
    codemods on the files as read, each rewrite checked on the inputs of the real run."""
    from gpuopt.fixes.catalogue import BY_NAME
    from gpuopt.fixes.loops.padding_batch import DEFAULT_BATCH
    from gpuopt.fixes.loops.plan import analyse, check, loop_sites, padding_batch_plan

    def wanted(name: str) -> bool:
        return name in opts.fixes or (not opts.fixes and not BY_NAME[name].opt_in)

    plans: dict[str, Any] = {}
    for name in ("vectorize", "padding"):
        if wanted(name) and loop_sites(base, name):
            plans[name] = analyse(base, name)
    batched = padding_batch_plan(base, DEFAULT_BATCH)
    if batched is not None:
        plans["padding-batch"] = batched
    checked = [p for n, p in plans.items() if n != "padding-batch"]
    if not any(p.rewrites for p in checked):
        return plans
    if opts.script is None:
        for p in checked:
            p.error = "the loop check runs scripts, not -m MODULE targets, so far"
        return plans
    phases.phase("checking the loop rewrites on the run's own inputs")
    check(checked, opts.script, list(opts.args), out / "loops", opts.steps)
    return plans
