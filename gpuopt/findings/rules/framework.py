"""``framework-bound``: much of the step is the training framework's own Python.

A framework runs hooks, a closure, logging and a progress bar around the user's training step;
for a small model that Python is a large part of the step (a Lightning autoencoder as in its basic
examples: the same 202-213 aten ops a step, 1.12 ms CPU in a plain loop, 2.65 ms under Lightning:
57% of the step its Python). ``framework.python_share`` is that part: the framework's share of
the training thread's CPU time, sampled over 20 steps (docs/frameworks.md); the finding says it
in the framework's own words and names its knobs that take Python out of every step, where they
are set (Lightning's ``Trainer(...)``, the HF Trainer's ``TrainingArguments(...)`` call), and its
advice past them (a larger batch, which spreads the per-step cost over more samples):
``STEP_KNOBS``, ``BOUND_PARTS`` and ``BOUND_ADVICE`` in the framework's module of
:mod:`gpuopt.frameworks`.
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
# the part of the framework's Python its knobs remove: enable_progress_bar=False takes 0.71 of
# the autoencoder's 3.11 ms CPU of Lightning Python a step (benchmarks/bench_frameworks.py)
REMOVED = 0.23


def spec_module(name: str) -> Any:
    """The framework's module in gpuopt.frameworks (None for a framework gpuopt has no spec of)."""
    if not name.isidentifier():
        return None
    try:
        mod = importlib.import_module(f"gpuopt.frameworks.{name}")
    except ImportError:
        return None
    # a document's name may be any string: only a module declaring that framework's spec
    spec = getattr(mod, "SPEC", None)
    return mod if getattr(spec, "name", None) == name else None


def step_knobs(name: str) -> tuple[str, dict[str, str]]:
    """The settings call and the knobs (argument → value) that take Python out of every step,
    none that changes what is trained (``("Trainer", {"enable_progress_bar": "False"})``)."""
    mod = spec_module(name)
    if mod is None:
        return "", {}
    wanted = set(getattr(mod, "STEP_KNOBS", ()))
    knobs = [k for k in mod.SPEC.knobs if k.argument in wanted and not k.changes_training]
    call = knobs[0].call if knobs else ""
    return call, {k.argument: k.value for k in knobs if k.call == call}


def knob_said(fw: Framework, fix: str) -> str | None:
    """The framework's own setting that is the ``gpuopt optimize`` fix ``fix``, as a user
    writes it and where (``TrainingArguments(bf16=True) at train.py:45``, ``the flag --amp on the
    command line``), else None."""
    mod = spec_module(fw.name)
    knob = next((k for k in mod.SPEC.knobs if k.finding == fix), None) if mod else None
    if knob is None:
        return None
    if knob.argument.startswith("-"):
        value = f" {knob.value}" if knob.value else ""
        return f"the flag {knob.argument}{value} on the command line"
    site = fw.settings_at.get(knob.call)
    return f"{knob.call}({knob.argument}={knob.value})" + (f" at {site}" if site else "")


def _bound_text(name: str) -> tuple[str, tuple[str, ...]]:
    """The framework's own words for its per-step Python (``BOUND_PARTS``) and its advice
    beyond the knobs (``BOUND_ADVICE``), from its spec module."""
    mod = spec_module(name)
    parts = getattr(mod, "BOUND_PARTS", "its loop's per-step Python")
    return str(parts), tuple(getattr(mod, "BOUND_ADVICE", ()))


def _fix(fw: Framework, call: str, knobs: dict[str, str], site: str | None) -> str:
    where = f" at {site}" if site else ""
    parts = []
    if knobs:
        args = ", ".join(f"{k}={v}" for k, v in knobs.items())
        parts.append(f"Set {call}({args}){where}")
    advice = _bound_text(fw.name)[1]
    parts += list(advice) or [
        "a larger batch spreads the framework's fixed cost per step over more samples"
    ]
    return "; ".join(parts) + "."


@rule("framework-bound", reads=("framework", "dispatch"))
def framework_bound(profile: Profile) -> list[Finding]:
    fw = profile.framework
    if not isinstance(fw, Framework) or fw.python_share is None:
        return []
    share = float(fw.python_share)
    if share < MIN_SHARE:
        return []
    call, knobs = step_knobs(fw.name)
    knobs_site = fw.knobs_site if isinstance(fw.knobs_site, str) else None
    knobs_site = knobs_site or (fw.settings_at.get(call) if call else None)
    site = knobs_site or fw.entry
    between = given(profile.dispatch.between_ops_us_per_step)
    params: dict[str, str] = {"framework": fw.name}
    if knobs and knobs_site:
        params.update(call=call, **knobs)
    return [
        Finding(
            id="framework-bound",
            severity=severity_for_share(share),
            title=f"{fmt_frac(share)} of the step is {fw.name}'s own Python "
            f"({_bound_text(fw.name)[0]})",
            site=site,
            evidence={
                "summary": (
                    f"{fw.name} {fw.version or ''}: {fmt_frac(share)} of the step in its own "
                    "Python, the rest the script's code, torch's ops and their dispatch "
                    "(the training thread's CPU time over 20 steps, split by whose code the "
                    "sampler saw)"
                ).replace("  ", " "),
                "python_share": share,
                "framework": fw.name,
                "between_ops_us_per_step": between if between is not None else 0.0,
                "entry": fw.entry or "",
            },
            fix=_fix(fw, call, knobs, site),
            fix_params=params,
            est_speedup=speedup_if_removed(share, keep=1.0 - REMOVED),
            estimate_model=(
                f"Amdahl: {int(REMOVED * 100)}% of the framework's Python "
                f"({fmt_frac(share)} of the step) assumed removed by its knobs"
            ),
        )
    ]
