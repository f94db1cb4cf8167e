"""The two sides of a comparison: one or more runs each, loaded, of one kind, and which of them
ran on a quiet enough machine for their timings to be compared.

A run whose machine was busy with other work (other processes kept at least
:data:`BUSY_EXTRA_CORES` more cores busy than in the quietest run compared, and the machine was
full: the run's own busy cores plus the others' within half a core of all cores) is *disturbed*:
its step times measure the neighbours as much as the code. Disturbed runs are left out of the
timed gates when each side keeps a quiet run; when only one side has quiet runs, the timed gates
are inconclusive (a slower step would be the load, not the change).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuopt.errors import GpuoptError
from gpuopt.gate.measures import Load, machine_load
from gpuopt.model.profile import Profile

BUSY_EXTRA_CORES = 0.5


@dataclass(frozen=True)
class Run:
    path: Path
    profile: Profile


def _kind(p: Profile) -> str:
    return "a trace" if p.source == "trace" else "a profiled run"


def load_side(paths: list[Path]) -> list[Run]:
    from gpuopt.loading import load

    return [Run(path, load(path)) for path in paths]


def same_kind(baseline: list[Run], candidate: list[Run]) -> None:
    """Refuse a comparison of a trace with a profiled run (one line, exit 2)."""
    runs = baseline + candidate
    first = runs[0]
    for r in runs[1:]:
        if (r.profile.source == "trace") != (first.profile.source == "trace"):
            raise GpuoptError(
                f"{r.path} is {_kind(r.profile)} and {first.path} {_kind(first.profile)}: "
                "compare like with like (traces with traces, runs with runs)"
            )


def _disturbed(load: Load, quietest: float) -> bool:
    if load.other is None or load.own is None or not load.cpu_count:
        return False
    full = load.own + load.other >= load.cpu_count - 0.5
    return load.other - quietest >= BUSY_EXTRA_CORES and full


def _busy(run: Run) -> str:
    load = machine_load(run.profile)
    return f"{run.path} (other processes kept {load.other:.2f} of {load.cpu_count} cores busy)"


@dataclass(frozen=True)
class Timed:
    """The runs the timed gates compare, and what was left out or why nothing can be."""

    baseline: list[Run]
    candidate: list[Run]
    notes: list[str]
    inconclusive: str | None = None


def timed_runs(baseline: list[Run], candidate: list[Run]) -> Timed:
    loads = [machine_load(r.profile).other for r in baseline + candidate]
    known = [x for x in loads if x is not None]
    if not known:
        return Timed(baseline, candidate, [])
    quietest = min(known)
    busy_a = [r for r in baseline if _disturbed(machine_load(r.profile), quietest)]
    busy_b = [r for r in candidate if _disturbed(machine_load(r.profile), quietest)]
    quiet_a = [r for r in baseline if r not in busy_a]
    quiet_b = [r for r in candidate if r not in busy_b]
    left = busy_a + busy_b
    if not left:
        return Timed(baseline, candidate, [])
    if quiet_a and quiet_b:
        note = "left out of the timed gates, ran on a busy machine: " + "; ".join(map(_busy, left))
        return Timed(quiet_a, quiet_b, [note])
    if not quiet_a and not quiet_b:
        note = "every run ran on a busy machine: " + "; ".join(map(_busy, left))
        return Timed(baseline, candidate, [note])
    side, other = ("baseline", "candidate") if not quiet_a else ("candidate", "baseline")
    note = (
        f"the {side} ran on a busy machine, the {other} did not: "
        + "; ".join(map(_busy, left))
        + f" (the quietest run: {quietest:.2f} cores of other work); run both sides on the same "
        "quiet machine, or several runs a side"
    )
    return Timed(baseline, candidate, [note], inconclusive=f"the {side} ran on a busy machine")


def environment_notes(baseline: list[Run], candidate: list[Run]) -> list[str]:
    """Differences between the machines the two sides ran on (timing gates compare them too)."""

    def machine(p: Profile) -> tuple[object, ...]:
        env = p.environment
        return (env.device, tuple(g.name for g in env.gpus), env.cpu_count, env.torch)

    a = {machine(r.profile) for r in baseline}
    b = {machine(r.profile) for r in candidate}
    if a == b:
        return []
    return [
        "the two sides ran on different machines or software (device, GPUs, CPU cores, torch): "
        "the timed gates compare those too"
    ]
