"""The ``framework`` key of a run's Profile, from what the framework probe recognised
(:mod:`gpuopt.probes.framework`: the stack at the first step boundaries, else the framework the
run imported): its name and version, the user's line into it and the calls that set its settings
(:func:`gpuopt.frameworks.detect.framework_record`), its loop's phases (batches by phase, counted
by the DataLoader probe, where the framework declares phases; else the optimizer's steps and the
evaluation loaders' batches), the share of the step's CPU time in its own code (the steps after
the recorder's window, sampled: :mod:`gpuopt.probes.framework_python`) and its settings call
before the entry (``knobs_site``)."""

from __future__ import annotations

import os
from pathlib import Path

from msgspec import UnsetType

from gpuopt.assemble.run_record import RunRecord
from gpuopt.frameworks.detect import framework_record as detected
from gpuopt.frameworks.detect import loader_origins, specs
from gpuopt.frameworks.frames import (
    Owners,
    call_line,
    framework_dirs,
    python_split,
    spec_modules,
)
from gpuopt.model.profile import Profile
from gpuopt.model.records import Framework, FrameworkPhase

# the order phases are listed in
PHASE_ORDER = ("sanity-check", "train", "validation", "eval", "predict")


def framework_record(rec: RunRecord, p: Profile) -> Framework | None:
    seen = rec.framework
    if seen is None:
        return None
    loaders = p.dataloaders if not isinstance(p.dataloaders, UnsetType) else None
    out = detected(seen, len(rec.step_ends), loaders)
    loader_origins(out, loaders or [])
    if rec.loaders is not None and rec.loaders.phases:
        phases = rec.loaders.phases
        ranked = sorted(phases, key=lambda n: PHASE_ORDER.index(n) if n in PHASE_ORDER else 99)
        out.phases = [FrameworkPhase(name=n, steps=phases[n]) for n in ranked]
    if out.entry is None and rec.loaders is not None:
        training = [s for s in rec.loaders.loaders if s.batches > s.eval_batches]
        if training:
            out.entry = max(training, key=lambda s: s.batches).site
    out.python_share = python_share(rec, out.name)
    found = knobs_site(rec.cwd, out.name, out.entry)
    if found is not None:
        out.knobs_site, call = found
        out.settings_at[call] = out.knobs_site
    return out


def knobs_site(cwd: str, name: str, entry: str | None) -> tuple[str, str] | None:
    """The framework's settings call (``Trainer(...)``) in the entry's file, as ``file:line``
    with the call's name: the last one before the entry's line, else the first; None where there
    is none."""
    calls = next((getattr(m, "CALLS", ()) for m in spec_modules() if m.SPEC.name == name), ())
    if not calls or not entry or ":" not in entry:
        return None
    file, _, line = entry.rpartition(":")
    try:
        source = Path(cwd, file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    found = call_line(source, calls, int(line) if line.isdigit() else None)
    return None if found is None else (f"{file}:{found}", calls[0])


def python_share(rec: RunRecord, name: str) -> float | None:
    """The framework's share of the training thread's CPU time in the steps sampled after the
    recorder's window (:mod:`gpuopt.probes.framework_python`): the CPU time of the looks whose
    stack's innermost frame owned by a framework, the user or torch is the framework's, over
    all of it. None where no step was sampled."""
    cap = rec.recorder
    if cap is None or not cap.python_cpu or cap.python_cpu_s <= 0 or cap.snapshot is None:
        return None
    resolver = cap.snapshot.resolver
    import sys

    import torch

    owners = Owners(
        framework_dirs(sys.modules, specs()),
        os.path.join(os.path.dirname(os.path.realpath(torch.__file__)), ""),
        resolver.is_user_file,
    )
    split = python_split(cap.python_cpu, cap.python_codes, owners)
    return round(min(1.0, split.get(name, 0.0) / cap.python_cpu_s), 4)
