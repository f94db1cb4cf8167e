"""``framework-bound``: much of the step is the training framework's own Python.

A framework runs hooks, a closure, logging and a progress bar around the user's training step;
for a small model that Python is a large part of the step (a Lightning autoencoder as in its basic
examples: the same 202-213 aten ops a step, 1.12 ms CPU in a plain loop, 2.65 ms under Lightning:
57% of the step its Python). ``framework.python_share`` is that part, as the recorder's window
measured it (docs/frameworks.md); the finding names the framework's knobs that take Python out
of every step and where they are set (the ``Trainer(...)`` call), and a larger batch, which
spreads the per-step cost over more samples.
"""

from __future__ import annotations

import importlib
from typing import Any

from gpuopt.findings.engine import rule
from gpuopt.findings.estimates import severity_for_share, speedup_if_removed
from gpuopt.model.profile import Finding, Profile
from gpuopt.model.records import Framework, given
from gpuopt.units import fmt_frac

MIN_SHARE = 0.2  # a fifth of the step in the framework's Python
# the part of the framework's Python its knobs remove: enable_progress_bar=False took 0.71 of
# the autoencoder's 3.11 ms CPU of Lightning Python a step (benchmarks/frameworks, 2026-11-28)
REMOVED = 0.23


def spec_module(name: str) -> Any:
    """The framework's module in gpuopt.frameworks (None for a framework gpuopt has no spec of)."""
    try:
        return importlib.import_module(f"gpuopt.frameworks.{name}")
    except ImportError:
        return None


def step_knobs(name: str) -> dict[str, str]:
    """The knobs (argument → value) that take Python out of every step, none that changes what
    is trained."""
    mod = spec_module(name)
    if mod is None:
        return {}
    wanted = set(getattr(mod, "STEP_KNOBS", ()))
    return {
        k.argument: k.value
        for k in mod.SPEC.knobs
        if k.argument in wanted and not k.changes_training
    }


def _fix(fw: Framework, knobs: dict[str, str], site: str | None) -> str:
    where = f" at {site}" if site else ""
    parts = []
    if knobs:
        args = ", ".join(f"{k}={v}" for k, v in knobs.items())
        parts.append(f"Set Trainer({args}){where}")
    if fw.name == "lightning":
        parts.append(
            "log fewer values a step (self.log(..., on_step=False) where an epoch's mean will do)"
        )
    parts.append("a larger batch spreads the framework's fixed cost per step over more samples")
    return "; ".join(parts) + "."


@rule("framework-bound", reads=("framework", "dispatch"))
def framework_bound(profile: Profile) -> list[Finding]:
    fw = profile.framework
    if not isinstance(fw, Framework) or fw.python_share is None:
        return []
    share = float(fw.python_share)
    if share < MIN_SHARE:
        return []
    knobs_site = fw.knobs_site if isinstance(fw.knobs_site, str) else None
    site = knobs_site or fw.entry
    knobs = step_knobs(fw.name)
    between = given(profile.dispatch.between_ops_us_per_step)
    params: dict[str, str] = {"framework": fw.name}
    if knobs and knobs_site:
        params.update(call="Trainer", **knobs)
    return [
        Finding(
            id="framework-bound",
            severity=severity_for_share(share),
            title=f"{fmt_frac(share)} of the step is {fw.name}'s own Python (hooks, closure, "
            "logging, progress bar)",
            site=site,
            evidence={
                "summary": (
                    f"{fw.name} {fw.version or ''}: {fmt_frac(share)} of the step in its own "
                    "Python, the rest the script's code, torch's ops and their dispatch "
                    "(the recorder's time between ops split by whose code the sampler saw)"
                ).replace("  ", " "),
                "python_share": share,
                "framework": fw.name,
                "between_ops_us_per_step": between if between is not None else 0.0,
                "entry": fw.entry or "",
            },
            fix=_fix(fw, knobs, site),
            fix_params=params,
            est_speedup=speedup_if_removed(share, keep=1.0 - REMOVED),
            estimate_model=(
                f"Amdahl: {int(REMOVED * 100)}% of the framework's Python "
                f"({fmt_frac(share)} of the step) assumed removed by its knobs"
            ),
        )
    ]
