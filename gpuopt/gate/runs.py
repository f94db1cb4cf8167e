"""The two sides of a comparison: one or more runs each, loaded, of one kind, and which of them
ran on a quiet enough machine for their timings to be compared.

A run whose machine slowed it is *disturbed*. Where the run measured its threads' wait for a core
(``utilization.cpu.run_delay_share``, :mod:`gpuopt.probes.contention`), that is the test: its
threads waited at least :data:`RUN_DELAY_BUSY` of their runnable time while other processes kept
at least :data:`OTHERS_MIN` core busy (a run whose own threads outnumber the cores waits on a quiet
machine too: that is its code, the same on both sides). Other processes' busy cores alone miss
the load that slows a multi-threaded step (an identical rerun 40% slower, not flagged), and flag
neighbours on cores the run did not need. Runs without it (older documents, other systems) get
the test by busy cores: other processes kept at least :data:`BUSY_CORES` busy (the mean
over the run's samples) and the machine was full (the run's own busy cores plus the others'
within half a core of all cores). Its step times measure the neighbours as much as the code: on
this project's 2-core machine a neighbour's test suite makes the same training step 1.4-3.4×
slower. Disturbed runs are left out of the timed gates when each side keeps a quiet run; when a
side has none, the timed gates are inconclusive (the exact counters still judge), unless the
step time moved far beyond what the load can explain (:func:`explained_slowdown`): that fails,
with the note that the machine was busy. Runs that did not record the machine's load (traces) are
taken as quiet.

That bound holds for a step that runs on one thread at a time: a thread that waits ``w`` of its
runnable time runs ``1 / (1 - w)`` slower. A step whose ops run on several intra-op threads
(:func:`parallel_threads`: torch used more than one, and some run of either side kept more than
:data:`PARALLEL_CORES` cores busy of its own) has no such bound: its threads meet at the end of
every parallel op, and a neighbour that takes one of them stalls the others, which spin or wait
meanwhile (their spinning counts as running, not waiting). Measured here (bench_check.py,
``corpus/vae``, 2 intra-op threads on 2 cores): identical runs **10.5× slower at a 56% wait**
and 19.7× with two spinning neighbours, where ``1 / (1 - w)`` × 1.5 allowed 3.4× — a false alarm.
So for such a step a busy side leaves the step-time gate inconclusive at any ratio (the counters
and findings still judge), and says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from gpuopt.errors import GpuoptError
from gpuopt.gate.measures import Load, machine_load
from gpuopt.model.profile import Profile

BUSY_CORES = 0.5
RUN_DELAY_BUSY = 0.05  # the run's threads waited at least 5% of their runnable time for a core
OTHERS_MIN = 0.25  # ... while other processes kept at least a quarter of a core busy
# The most a busy machine can slow a run beyond its threads' measured wait: caches, memory
# bandwidth and the core's other hardware thread shared with the neighbour. Measured by
# benchmarks/bench_check.py's loaded identical runs of a one-thread step (docs/benchmarks.md):
# index_loops under one spinning neighbour ran 3.97x slower at a 20.5% wait, its interval's low
# end 1.99x, 1.58 times 1 / (1 - wait): the most of 61 such runs (one neighbour 40, two 21)
CONTENTION_MARGIN = 2.0
# a run that kept more than this many cores busy of its own ran its ops on several threads
PARALLEL_CORES = 1.25


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


def disturbed(load: Load) -> bool:
    if load.run_delay is not None:
        return load.run_delay >= RUN_DELAY_BUSY and (load.other or 0.0) >= OTHERS_MIN
    if load.other is None or load.own is None or not load.cpu_count:
        return False
    full = load.own + load.other >= load.cpu_count - 0.5
    return load.other >= BUSY_CORES and full


def explained_slowdown(load: Load) -> float:
    """The most this run's step can have been slowed by the machine's load (a factor): its threads
    ran ``1 - wait share`` of the time they were ready to (``1 / (1 - w)``), else the cores the
    others left it of all cores; times :data:`CONTENTION_MARGIN`."""
    if load.run_delay is not None:
        bound = 1.0 / max(1.0 - load.run_delay, 0.05)
    elif load.other is not None and load.cpu_count:
        bound = load.cpu_count / max(load.cpu_count - load.other, 0.5)
    else:
        bound = 1.0
    return bound * CONTENTION_MARGIN


def parallel_threads(runs: list[Run]) -> int | None:
    """torch's intra-op threads where the step ran on several of them (see the module), else
    None: more than one thread, and some run kept more than :data:`PARALLEL_CORES` cores busy."""
    loads = [machine_load(r.profile) for r in runs]
    threads = max((x.threads for x in loads if x.threads), default=0)
    own = max((x.own for x in loads if x.own is not None), default=0.0)
    return threads if threads > 1 and own > PARALLEL_CORES else None


def busy_text(run: Run) -> str:
    """``PATH (other processes kept 1.80 of 2 cores busy; its threads waited 88% ...)``."""
    load = machine_load(run.profile)
    other = f"other processes kept {load.other:.2f} of {load.cpu_count} cores busy"
    if load.run_delay is None:
        return f"{run.path} ({other})"
    return f"{run.path} ({other}; its threads waited {load.run_delay:.0%} of their time for a core)"


@dataclass(frozen=True)
class Timed:
    """The runs the timed gates compare, and what was left out or why nothing can be."""

    baseline: list[Run]
    candidate: list[Run]
    notes: list[str]
    inconclusive: str | None = None
    # with ``inconclusive``: the most the load can have slowed the candidate's step (a factor;
    # infinite where nothing bounds it: a step on several threads)
    explained: float | None = None


def timed_runs(baseline: list[Run], candidate: list[Run]) -> Timed:
    busy_a = [r for r in baseline if disturbed(machine_load(r.profile))]
    busy_b = [r for r in candidate if disturbed(machine_load(r.profile))]
    quiet_a = [r for r in baseline if r not in busy_a]
    quiet_b = [r for r in candidate if r not in busy_b]
    left = busy_a + busy_b
    if not left:
        return Timed(baseline, candidate, [])
    if quiet_a and quiet_b:
        note = "left out of the timed gates, ran on a busy machine: " + "; ".join(
            map(busy_text, left)
        )
        return Timed(quiet_a, quiet_b, [note])
    sides = [s for s, quiet in (("baseline", quiet_a), ("candidate", quiet_b)) if not quiet]
    who = " and the ".join(sides)
    note = (
        f"the {who} ran on a busy machine: "
        + "; ".join(map(busy_text, left))
        + "; run both sides on a quiet machine, or several runs a side (a quiet one is enough)"
    )
    explained = max((explained_slowdown(machine_load(r.profile)) for r in busy_b), default=1.0)
    threads = parallel_threads(baseline + candidate)
    if threads:
        explained = math.inf
        note += (
            f"; its ops run on {threads} threads, which a busy machine slows by any factor (an "
            "identical run 10× slower at a 56% wait in this project's benchmark): the step time "
            "is not judged"
        )
    return Timed(
        baseline,
        candidate,
        [note],
        inconclusive=f"the {who} ran on a busy machine",
        explained=explained,
    )


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
