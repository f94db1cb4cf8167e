"""The analyses ``gpuopt optimize`` runs in child processes before it plans, and when: the
DataLoader sweep (a ``dataloader-bound`` finding whose DataLoader line is known, and the
dataloader fix wanted: the default, or ``--fix dataloader``), and the AoT analysis (only with
``--fix aot``: it captures the model)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gpuopt.errors import GpuoptError
from gpuopt.model.profile import Profile

if TYPE_CHECKING:
    from gpuopt.optimize.aot_check import AotSummary
    from gpuopt.optimize.command import OptimizeOptions
    from gpuopt.optimize.progress import Phases
    from gpuopt.optimize.sweep import SweepResult


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
    from gpuopt.optimize.sweep import run_sweep

    phases.phase(f"sweeping DataLoader settings at {finding.site}")
    step = base.steps.time_s.median
    compute = step * (1.0 - base.breakdown.data_wait) if step else None
    need = 1.0 / compute if compute else None
    try:
        sweep = run_sweep(opts.script, list(opts.args), finding.site, out / "sweep.json", need=need)
        return sweep, None
    except GpuoptError as exc:
        return None, str(exc)


def aot_for(
    opts: OptimizeOptions, out: Path, phases: Phases
) -> tuple[AotSummary | None, str | None]:
    """Nimble's plan of the script's model, its CPU proof and its estimate, or why there is
    none (None, None: not asked for)."""
    if "aot" not in opts.fixes:
        return None, None
    if opts.script is None:
        return None, "the AoT analysis runs scripts, not -m MODULE targets, so far"
    from gpuopt.optimize.aot_check import run_aot_check

    phases.phase("planning the model's streams (AoT)")
    try:
        return run_aot_check(opts.script, list(opts.args), out / "aot.json"), None
    except GpuoptError as exc:
        return None, str(exc)
