"""How long ``gpuopt optimize`` measures, and which fixes its measures keep. Pure policy: the
runs themselves are :mod:`gpuopt.optimize.command`'s.

**Timed runs.** The first baseline run is the profile the fixes are planned from: instrumented
(the recorder's window, on a GPU the profiler window, the sampler), so it is never timed. Every
other run is ``gpuopt profile --measure-only``: the step clock, the losses kept on the device,
the DataLoader probe and the batch shapes — the same light instrumentation on both sides, so a
gain cannot come from gpuopt's own cost.

**How long.** The baseline and candidate runs alternate. After the fewest runs that give a
verdict (two timed baselines and, unless ``--quick``, two candidates), pairs are added until
each side's interval is within ±5% of its level with three runs a side at least (*tight*), or
the candidate is found slower (it will be dropped: no need to know by how much more exactly;
from a single candidate run only when clearly so — :func:`clearly_slower` — else a second one
runs first, ``--quick`` too),
or a side has :data:`MAX_TIMED_RUNS` runs, or the next pair would end past the time budget
(``--time-budget``, default :data:`DEFAULT_TIME_BUDGET_S` seconds from optimize's start; with
``--quick`` and no budget given, none is added). The gain says which of these stopped it.

**Which fixes stay.** A fix measured slower (its own runs: alone, or the candidate when it is the
only one) is dropped, "N× slower". A fix measured faster stays. A fix with no measurable gain
stays only when its gain is GPU-only and the run had no GPU (on a GPU, GPU-only fixes are
measured like any other), or when the user asked for it by name (``--fix NAME``); otherwise it
is dropped, with what it measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import median

from gpuopt.model.optimize import Gain
from gpuopt.optimize.catalogue import FixKind

DEFAULT_TIME_BUDGET_S = 300.0  # optimize's measuring stops adding runs past this (seconds)
MAX_TIMED_RUNS = 8  # timed runs a side at most
TIGHT = 0.05  # a side is measured well enough when its interval is within ±5% of its level
MIN_RUNS_TIGHT = 3  # timed runs a side before its interval can be called tight
CLEAR_SLOWDOWN = 0.25  # slower than 1 / 1.25 in one candidate run: dropped without a second


@dataclass
class Budget:
    """The time cap, counted from optimize's start (None: no cap but :data:`MAX_TIMED_RUNS`)."""

    limit_s: float | None
    t0: float = field(default_factory=time.perf_counter)
    clock: Callable[[], float] = time.perf_counter

    def elapsed(self) -> float:
        return self.clock() - self.t0

    def fits(self, more_s: float) -> bool:
        """Whether ``more_s`` seconds more still end within the cap."""
        return self.limit_s is None or self.elapsed() + more_s <= self.limit_s


def predicted_s(walls: Sequence[float | None]) -> float:
    """What the next run of a kind will take: the median of that kind's runs so far."""
    known = [w for w in walls if w is not None]
    return float(median(known)) if known else 0.0


def tight(g: Gain) -> bool:
    """Whether each side's interval is within ±:data:`TIGHT`, from at
    least :data:`MIN_RUNS_TIGHT` runs a side (two runs that agree by chance say little of how
    far a third would be)."""
    widths = (g.baseline_half_width, g.candidate_half_width)
    runs = g.runs if isinstance(g.runs, list) else [0]
    enough = min(runs) >= MIN_RUNS_TIGHT
    return enough and all(isinstance(w, float) and w <= TIGHT for w in widths)


def clearly_slower(g: Gain) -> bool:
    """Slower by more than one candidate run's luck could make it: beyond
    :data:`CLEAR_SLOWDOWN`, or twice the noise. A single run measured slower by less is run once
    more before its fix is dropped (a neighbour's burst in the one candidate run, with two
    baseline runs that happened to agree, measured a sleeping 5 ms step 1.22x slower here)."""
    if g.verdict != "slower" or g.speedup is None:
        return False
    noise = g.noise or 0.0
    return g.speedup < 1.0 / (1.0 + max(2 * noise, CLEAR_SLOWDOWN))


def stop_reason(g: Gain, runs: tuple[int, int], extend: bool, next_fits: bool) -> str | None:
    """Why the measuring stops now, or None to measure one more pair. ``runs``: timed runs on
    each side; ``extend``: pairs may be added at all (not ``--quick`` without a budget);
    ``next_fits``: the next pair ends within the budget."""
    if g.verdict == "slower" and (runs[1] >= 2 or clearly_slower(g)):
        return "slower"
    if g.verdict == "slower" and runs[1] < 2:
        return None  # one candidate run, a little slower: a second one confirms (or not)
    if tight(g):
        return "tight"
    if not extend:
        return "minimum runs"
    if max(runs) >= MAX_TIMED_RUNS:
        return "runs cap"
    if not next_fits:
        return "time budget"
    return None


def how_sure(g: Gain) -> str:
    """One line: how sure the gain is and why the measuring stopped."""
    if g.speedup is None:
        return ""
    b, c = g.baseline_half_width, g.candidate_half_width
    widths = ""
    if isinstance(b, float) and isinstance(c, float):
        widths = f"baseline ±{b:.0%}, candidate ±{c:.0%} at 90%"
    stopped = g.stopped if isinstance(g.stopped, str) else ""
    why = {
        "tight": "each side within ±5%",
        "slower": "stopped once found slower",
        "minimum runs": "the fewest runs (--quick)",
        "runs cap": f"stopped at {MAX_TIMED_RUNS} runs a side",
        "time budget": "stopped by the time budget",
        "one run": "measured alone in one run",
        "confirmed": "measured alone in two runs (the first a little slower)",
    }.get(stopped, stopped)
    return "; ".join(x for x in (widths, why) if x)


@dataclass(frozen=True)
class Keep:
    """A measured fix's fate: ``drop`` is the reason it goes (None: it stays); ``note`` what
    the user should know when it stays without a measured gain."""

    drop: str | None
    note: str | None = None


def keep_or_drop(kind: FixKind, g: Gain, on_gpu: bool, named: bool) -> Keep:
    """Whether a fix stays, from the gain of its own runs."""
    shown = _shown(g)
    if g.verdict == "slower":
        return Keep(f"{g.label} in the training run ({shown})")
    if g.verdict == "faster":
        return Keep(None)
    if (kind.gpu_only or kind.gpu_gain) and not on_gpu:
        return Keep(
            None,
            f"no GPU here: its gain is a GPU's, kept unmeasured (it measured {shown} on this CPU)",
        )
    if named:
        return Keep(None, f"kept as asked (--fix {kind.name}): no measurable gain ({shown})")
    return Keep(
        f"no measurable gain ({shown}); a fix stays only with a measured gain, or when asked "
        f"for by name (--fix {kind.name})"
    )


def _shown(g: Gain) -> str:
    if g.speedup is None:
        return g.label or "not measured"
    interval = f" [{g.low:.2f}-{g.high:.2f}]" if g.low is not None and g.high is not None else ""
    noise = f", run-to-run noise {g.noise:.0%}" if g.noise else ""
    return f"{g.speedup:.2f}x{interval}{noise}"
