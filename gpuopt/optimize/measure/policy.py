"""How long ``gpuopt optimize`` measures, and which fixes its measures keep. Pure policy: the
runs themselves are :mod:`gpuopt.commands.optimize`'s.

**Timed runs.** The first baseline run is the profile the fixes are planned from: instrumented
(the recorder's window, on a GPU the profiler window, the sampler), so it is never timed. Every
other run is ``gpuopt profile --measure-only``: the step clock, the losses kept on the device,
the DataLoader probe and the batch shapes — the same light instrumentation on both sides, so a
gain cannot come from gpuopt's own cost.

**How long.** The baseline and candidate runs alternate. After the fewest runs that give a
verdict (two timed baselines and, unless ``--quick``, two candidates), pairs are added until
each side's interval is within ±5% of its level with three runs a side at least (*tight*), or a
side has :data:`MAX_TIMED_RUNS` runs (:data:`MAX_UNDECIDED_RUNS` for a gain on the runs' pairs
still :func:`undecided`), or the next pair would end past the time budget
(``--time-budget``, default :data:`DEFAULT_TIME_BUDGET_S` seconds from optimize's start; with
``--quick`` and no budget given, none is added). The gain says which of these stopped it.

A candidate found **slower** is measured by the same rule: it will be dropped, but the size
printed ("1.26x slower") must be one the runs support, and two runs a side leave it as wide as
two runs make it (the syncs fix on a CPU can read "1.26x slower [0.67-0.95]" from two runs a
side where the same change timed outside gpuopt is 1.05x slower). Two exceptions:

* a single candidate run a little slower (not :func:`clearly_slower`) is run once more before
  anything else, ``--quick`` too (a neighbour's burst in one run);
* a candidate **far slower** (:func:`far_slower`: the whole interval below 1 /
  :data:`FAR_SLOWER`, i.e. more than twice as slow beyond doubt) stops at
  :data:`MIN_RUNS_TIGHT` runs a side, tight or not (``stopped: far slower``): it goes whatever
  more runs say, each more candidate run costs over two baseline runs' steps (a 15x slower
  fp16 autocast, fifteen), and three runs a side already put the candidate's run-to-run spread
  into its interval. Its size is printed with that interval and each side's ±.

A gain from one candidate run (``--quick``, or the budget) has no candidate run-to-run spread in
its interval: :func:`how_sure` says so.

**Which fixes stay.** A fix measured slower (its own runs: alone, or the candidate when it is the
only one) is dropped, "N× slower". A fix measured faster stays. A fix with no measurable gain
stays only when its gain is GPU-only and the run had no GPU (on a GPU, GPU-only fixes are
measured like any other), when the training runs could not decide and a measurement outside
them estimates a large gain (:func:`kept_on_estimate`: the DataLoader sweep's, said as an
estimate), or when the user asked for it by name (``--fix NAME``); otherwise it is dropped,
with what it measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import median

from gpuopt.fixes.kind import FixKind
from gpuopt.model.optimize import PAIRED, Gain

DEFAULT_TIME_BUDGET_S = 300.0  # optimize's measuring stops adding runs past this (seconds)
MAX_TIMED_RUNS = 8  # timed runs a side at most
# a gain on the runs' pairs still undecided at MAX_TIMED_RUNS: pairs go on to this many a side
# (within the budget); one busy machine's 8 pairs put a DataLoader fix at 1.28x [0.95-1.74]
MAX_UNDECIDED_RUNS = 12
TIGHT = 0.05  # a side is measured well enough when its interval is within ±5% of its level
MIN_RUNS_TIGHT = 3  # timed runs a side before its interval can be called tight
CLEAR_SLOWDOWN = 0.25  # slower than 1 / 1.25 in one candidate run: no second run to confirm it
FAR_SLOWER = 2.0  # an interval wholly below 1 / 2: sized from MIN_RUNS_TIGHT runs a side at most
# an estimated gain that keeps a fix its training runs could not decide: examples/io_loader.py's
# sweep estimated 1.76-3.47x in 5 optimize runs and training gained 0.70-1.69 times the estimate
EXPECTED_KEEP = 1.5


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


def far_slower(g: Gain) -> bool:
    """More than :data:`FAR_SLOWER` times slower beyond doubt: the whole interval below
    1 / :data:`FAR_SLOWER` (a point estimate alone is not enough: one run's capture step must not
    decide how long a fix is measured)."""
    return g.verdict == "slower" and g.high is not None and g.high < 1.0 / FAR_SLOWER


def undecided(g: Gain) -> bool:
    """A gain measured on the runs' pairs (a DataLoader fix's training time) whose interval
    holds both no gain and a gain past :data:`~gpuopt.optimize.measure.speed.MIN_EFFECT`: neither
    faster nor slower, and its high end above 1.03. More pairs can settle it."""
    pairs = isinstance(g.statistic, str) and PAIRED in g.statistic
    open_high = g.high is None or g.high > 1.03
    return pairs and g.verdict in ("no-gain", "not-measured") and open_high


def stop_reason(g: Gain, runs: tuple[int, int], extend: bool, next_fits: bool) -> str | None:
    """Why the measuring stops now, or None to measure one more pair. ``runs``: timed runs on
    each side; ``extend``: pairs may be added at all (not ``--quick`` without a budget);
    ``next_fits``: the next pair ends within the budget. A slower candidate is measured like a
    faster one, but for the two exceptions in the module's docstring."""
    if g.verdict == "slower" and runs[1] < 2 and not clearly_slower(g):
        return None  # one candidate run, a little slower: a second one confirms (or not)
    if tight(g):
        return "tight"
    if not extend:
        return "minimum runs"
    if far_slower(g) and min(runs) >= MIN_RUNS_TIGHT:
        return "far slower"
    if max(runs) >= (MAX_UNDECIDED_RUNS if undecided(g) else MAX_TIMED_RUNS):
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
        "slower": "every fix dropped at once on its own run",
        "far slower": f"stopped at {MIN_RUNS_TIGHT} runs a side: more than {FAR_SLOWER:g}x slower",
        "minimum runs": "the fewest runs (--quick)",
        "runs cap": f"stopped at {max(g.runs) if isinstance(g.runs, list) else MAX_TIMED_RUNS} "
        "runs a side",
        "time budget": "stopped by the time budget",
        "one run": "measured alone in one run",
        "confirmed": "measured alone in two runs (the first a little slower)",
    }.get(stopped, stopped)
    one = ""
    if isinstance(g.runs, list) and len(g.runs) == 2 and g.runs[1] == 1:
        one = "one candidate run: its run-to-run spread is not in the interval"
    return "; ".join(x for x in (widths, why, one) if x)


# a fix whose gain is a GPU's, kept on a machine without one: what a CPU measured is not its gain
GPU_GAIN_NOTE = "no GPU here: its gain is a GPU's, kept unmeasured"


@dataclass(frozen=True)
class Keep:
    """A measured fix's fate: ``drop`` is the reason it goes (None: it stays); ``note`` what
    the user should know when it stays without a measured gain."""

    drop: str | None
    note: str | None = None


def keep_or_drop(
    kind: FixKind, g: Gain, on_gpu: bool, named: bool, expected: float | None = None
) -> Keep:
    """Whether a fix stays, from the gain of its own runs. A fix judged by the memory it frees
    stays whatever its speed (a slower step that fits is its point): its samples/s are its cost,
    shown beside its memory; the memory decides later (:mod:`gpuopt.optimize.measure.memory`).
    ``expected``: the training's gain estimated from a measurement outside it (the DataLoader
    sweep's), which keeps a fix whose training runs could not decide (:func:`kept_on_estimate`)."""
    shown = _shown(g)
    if kind.judged_by_memory:
        return Keep(None)
    if g.verdict == "slower":
        return Keep(f"{g.label} in the training run ({shown})")
    if (kind.gpu_only or kind.gpu_gain) and not on_gpu:
        return Keep(None, GPU_GAIN_NOTE)
    if g.verdict == "faster":
        return Keep(None)
    why = g.label if g.verdict == "not-measured" else f"no measurable gain ({shown})"
    if kept_on_estimate(g, expected):
        return Keep(
            None,
            f"the training runs could not decide ({why}); kept on the sweep's timing of the "
            f"loader alone: est. {expected:.2f}x on an epoch (an estimate: the loader's pace "
            "timed alone, taking turns with the profile's compute at 0 workers, overlapping it "
            "with workers)",
        )
    if named:
        return Keep(None, f"kept as asked (--fix {kind.name}): {why}")
    return Keep(
        f"{why}; a fix stays only with a measured gain, or when asked for by name "
        f"(--fix {kind.name})"
    )


def kept_on_estimate(g: Gain, expected: float | None) -> bool:
    """A fix whose training runs could not decide — too noisy, or a gain on the runs' pairs
    still :func:`undecided` — stays when a measurement outside the training estimates at least
    :data:`EXPECTED_KEEP`. On a busy machine the runs with workers scatter (beside two busy
    loops some took 10-20x the others' time), while the sweep times the loader on the CPU it
    used; a tight no-gain (the interval's high end within 1.03) still drops the fix."""
    if expected is None or expected < EXPECTED_KEEP:
        return False
    return g.verdict == "not-measured" or undecided(g)


def _shown(g: Gain) -> str:
    if g.speedup is None:
        return g.label or "not measured"
    interval = f" [{g.low:.2f}-{g.high:.2f}]" if g.low is not None and g.high is not None else ""
    if interval and isinstance(g.runs, list) and len(g.runs) == 2 and g.runs[1] == 1:
        interval += " from one run"
    noise = f", run-to-run noise {g.noise:.0%}" if g.noise else ""
    return f"{g.speedup:.2f}x{interval}{noise}"
