"""When ``gpuopt optimize`` sweeps the DataLoader: only for a ``dataloader-bound`` finding whose
DataLoader line is known, and only when the dataloader fix is wanted (the default, or
``--fix dataloader``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gpuopt.errors import GpuoptError
from gpuopt.model.profile import Profile

if TYPE_CHECKING:
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
