"""Findings that do not flicker: a rule's evidence with its interval, and one policy for all.

A share of step time measured on one run is a noisy number: the per-step values it comes from
vary within the run, and a second run of the same code lands elsewhere (its neighbours' load, its
caches). A rule that compares the point value with a threshold then fires in some runs of
identical code and not in others, and a gate that fails on "new HIGH finding" fails at random
(issue 30: ``launch-bound`` in 1 of 8 identical runs). So a rule that has per-step values of its
evidence draws an interval around it, and the policy is:

* the finding is reported when the value reaches the rule's threshold (as before);
* its severity comes from the interval's **lower bound**, on the shared scale
  (:func:`~gpuopt.findings.estimates.severity_for_share`);
* it is **borderline** when the interval reaches below the rule's threshold, or straddles the
  HIGH boundary: a borderline finding is never HIGH (at most MEDIUM), and says so.

The interval (90%, two-sided) combines the within-run variation of the per-step values (a Student-t
interval of their mean: three recorded steps give a wide one) with a run-to-run drift
(:func:`drift_of`), as ``gpuopt check``'s intervals do: :data:`SHARE_DRIFT` on a quiet machine, more
on a busy one. On a machine whose neighbours held the cores, identical runs' shares moved far more
than their steps' spread says (``benchmarks/bench_stability.py`` under a load of 5-15 on 2 cores: a
data-wait share of 16%, 29% and 36% in three runs of ``examples/io_loader.py``, a loop's share
22-58% in ``examples/index_loops.py``): the steps of one run share the neighbour's load of that
moment. So the drift grows with the run's measured wait for a core
(``utilization.cpu.run_delay_share``) while other processes kept the cores busy: :data:`BUSY_DRIFT`
per unit of that wait, times the others' busy cores up to one. ``gpuopt check`` compares findings by
these intervals: a HIGH finding absent from the baseline fails only when its interval lies above the
baseline's evidence.

A share the recorder measured at one site carries one more error: the recorder's own cost, which
the assembly subtracts from the site's time with a per-op estimate. Where a site's ops are tiny
that cost is many times the site's own time (``examples/index_loops.py``: the window's steps are
12-25× the unrecorded ones), and the estimate misses the window's observed cost (its steps' time
less the unrecorded steps' median) by 20-95% (200 runs of 10 scripts, bench_stability): what is
left of the site's time is mostly the estimate's error, and a loop's share read 26-83% in identical
runs. So such an interval also covers that error (:func:`recorder_model`): the run's own measured
miss (at least :data:`RECORDER_ERR_FLOOR`) times the recorder's estimated cost at the site as a
share of the step, or, where larger, the whole of what the window cost beyond the estimate (its
steps' time less the unrecorded steps' median less the estimate, over the step), since where that
missed cost lands is not measured and it can all land at one site (examples/ragged_steps.py: a
per-sample loop that takes 48% of the step by a hand-placed clock read 82-100%, HIGH in 18 of 20
identical runs, before the lines' times were scaled into the step; examples/index_loops.py's
lines, scaled, read 42-46% for a true 26% and 4-15% for another true 26%). A loop of tiny ops
is then borderline, never HIGH, whatever its point share; a loop of few, large ops keeps a narrow
interval. ``launch-bound``'s dispatch share, measured through the same recorder, carries the
same error.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuopt.findings.estimates import severity_for_share
from gpuopt.model.profile import EvidenceInterval, Profile, Severity
from gpuopt.student_t import t95
from gpuopt.units import num

LEVEL = 0.90
Z = 1.6448536269514722  # the normal's 95th percentile: a 90% two-sided interval
HIGH_SHARE = 0.25  # severity_for_share's HIGH boundary
# The run-to-run drift of a share of step time on a quiet machine (standard deviation, in points
# as a fraction), added to every interval's within-run part. benchmarks/bench_stability.py's
# "evidence sd" column measures it over identical runs; its quiet run is the lead's to record
# (docs/benchmarks.md, issue 30). Under load slow_dataset's data-wait share moved 36-40%.
SHARE_DRIFT = 0.02
# The drift added per unit of the run's threads' wait for a core (a share of their runnable time),
# scaled by other processes' busy cores (at most 1): 21pt more at an 85% wait, where the
# bench_stability runs above spread by up to 18pt (sd)
BUSY_DRIFT = 0.25
# The least relative error assumed of the recorder's per-op cost estimate in a window (its run's
# own measured miss counts when larger): benchmarks/bench_stability.py's "recorder miss" column
# (docs/benchmarks.md, issue 30)
RECORDER_ERR_FLOOR = 0.10


@dataclass(frozen=True)
class Drift:
    """The run-to-run drift a finding's interval assumes, and why (for ``covers``)."""

    value: float = SHARE_DRIFT
    busy: str = ""  # "" on a quiet machine, else what the machine did to the run


def drift_of(profile: Profile, quiet: float = SHARE_DRIFT) -> Drift:
    """``quiet`` (:data:`SHARE_DRIFT`, or a rule's own measured drift), plus :data:`BUSY_DRIFT`
    × the run's threads' wait for a core × other processes' busy cores (at most 1), where the
    run measured them."""
    from gpuopt.model.records import given

    cpu = profile.utilization.cpu
    wait = given(cpu.run_delay_share)
    others = given(cpu.other_cores_busy_mean)
    if not isinstance(wait, (int, float)) or not isinstance(others, (int, float)):
        return Drift(quiet)
    extra = BUSY_DRIFT * float(wait) * min(max(float(others), 0.0), 1.0)
    if extra < 0.005:
        return Drift(quiet)
    why = (
        f"a busy machine: its threads waited {float(wait):.0%} of their time for a core while "
        f"other processes kept {float(others):.1f} cores busy"
    )
    return Drift(quiet + extra, why)


@dataclass(frozen=True)
class Model:
    """An error of the measurement itself, added to an interval: its half-width (share points)
    and what it is (for ``covers``)."""

    half: float
    why: str


def _recorder_cost(profile: Profile) -> tuple[float, float, float] | None:
    """``(estimated, observed, step)`` in µs: the recorder's estimated cost per window step (its
    cost per op times the ops per step), what the window observably cost (its raw step time less
    the unrecorded steps' median) and that median. None where the run lacks any."""
    d = profile.dispatch
    per_op, ops, raw = (
        num(d.recorder_overhead_us_per_op),
        num(d.ops_per_step),
        num(d.step_time_us_raw),
    )
    real = num(profile.steps.time_s.median)
    if per_op is None or ops is None or raw is None or real is None or real <= 0:
        return None
    return per_op * ops, raw - real * 1e6, real * 1e6


def recorder_miss(profile: Profile) -> float | None:
    """How far this run's estimate of the recorder's cost in its window missed what the window
    observably cost: ``|1 - estimated / observed|`` (:func:`_recorder_cost`). None where the run
    lacks either."""
    cost = _recorder_cost(profile)
    if cost is None or cost[0] <= 0 or cost[1] <= 0:
        return None
    return abs(1.0 - cost[0] / cost[1])


def recorder_missed(profile: Profile) -> float:
    """What the window's recorder cost beyond its estimate, as a share of the unrecorded step:
    ``(observed - estimated) / step`` (:func:`_recorder_cost`); 0 where the estimate covered it
    or the run lacks either."""
    cost = _recorder_cost(profile)
    if cost is None:
        return 0.0
    estimated, observed, step = cost
    return max(observed - estimated, 0.0) / step


def recorder_model(profile: Profile, ops_per_step: float | None) -> Model | None:
    """The error a site's recorded share carries from the recorder's own cost subtracted at it
    (see the module's docstring): the larger of the run's miss (at least
    :data:`RECORDER_ERR_FLOOR`) times the recorder's estimated cost at the site's
    ``ops_per_step`` as a share of the unrecorded step, and the whole of what the window cost
    beyond its estimate (:func:`recorder_missed`): where that missed cost lands is not measured,
    and it can all have landed at one site (examples/ragged_steps.py: a per-sample loop that
    takes 48% of the step timed by hand read 82-100%, with a miss of 44-71% at a cost of 0.4-0.6
    steps; examples/index_loops.py's ``counts[ids[i]] += 1`` read 62% for a true 26%, its
    neighbouring loops nearly right; the lines' times scaled into the step since, the same loop
    reads 42-46%). None where the run did not measure the recorder's cost."""
    per_op = num(profile.dispatch.recorder_overhead_us_per_op)
    real = num(profile.steps.time_s.median)
    if per_op is None or real is None or real <= 0 or not ops_per_step:
        return None
    miss = recorder_miss(profile)
    err = max(miss if miss is not None else 0.0, RECORDER_ERR_FLOOR)
    cost = per_op * float(ops_per_step) / (real * 1e6)  # the recorder's cost at the site / step
    missed = recorder_missed(profile)
    half = max(err * cost, missed)
    if half < 0.005:
        return None
    how = f"its estimate missed by {miss:.0%} in this run" if miss is not None else "not checked"
    if half > err * cost:
        why = (
            f"±{half * 100:.0f}pt for the recorder's cost the window's estimate missed "
            f"({missed:.1f}× the step, {how}), which may all have landed at the site "
            f"(its estimated cost there {cost:.1f}× the step)"
        )
    else:
        why = (
            f"±{half * 100:.0f}pt for the recorder's cost subtracted at the site ({cost:.1f}× "
            f"the step; {how}, at least {RECORDER_ERR_FLOOR:.0%} assumed)"
        )
    return Model(half, why)


# Student's t up to this many degrees of freedom (a 90% two-sided interval); more: Z
T_MAX_DF = 9


def _t95(df: int) -> float:
    return t95(df, Z) if df <= T_MAX_DF else Z


def share_interval(
    value: float,
    per_step: Sequence[float],
    what: str,
    drift: Drift | None = None,
    model: Model | None = None,
) -> EvidenceInterval:
    """The interval of a share ``value`` measured from ``per_step`` values (its within-run
    variation) plus the run-to-run ``drift`` (default: a quiet machine's) and the measurement's
    own error ``model`` where it has one; clipped to [0, 1].
    ``what``: the evidence key it belongs to (``data_wait_share``, ``host_dispatch_share``)."""
    drift = drift or Drift()
    xs = [float(x) for x in per_step if x is not None and math.isfinite(float(x))]
    n = len(xs)
    import statistics  # 5-10 ms to import, and only a few rules' evidence needs it

    within = _t95(n - 1) * statistics.stdev(xs) / math.sqrt(n) if n >= 2 else 0.0
    half = math.hypot(within, Z * drift.value, model.half if model else 0.0)
    size = f"a {drift.value * 100:.0f}pt run-to-run drift" + (
        f" ({drift.busy})" if drift.busy else ""
    )
    if model:
        size += f", and {model.why}"
    covers = (
        f"{LEVEL:.0%} interval: {n} steps' variation and {size}"
        if n >= 2
        else f"{LEVEL:.0%} interval: {size} (no per-step values)"
    )
    return EvidenceInterval(
        metric=what,
        value=round(value, 4),
        low=round(max(value - half, 0.0), 4),
        high=round(min(value + half, 1.0), 4),
        level=LEVEL,
        steps=n,
        covers=covers,
    )


@dataclass(frozen=True)
class Judged:
    """What the policy makes of an interval: the severity, and whether it is borderline."""

    severity: Severity
    borderline: bool
    why: str  # "" unless borderline: what it is near


def judge(iv: EvidenceInterval, threshold: float) -> Judged:
    """The severity of a finding whose evidence ``iv`` reached the rule's ``threshold`` (see the
    module's docstring): from the lower bound; borderline (never HIGH) within noise of the
    threshold or of the HIGH boundary."""
    severity = severity_for_share(iv.low)
    near: list[str] = []
    if iv.low < threshold:
        near.append(f"its threshold {threshold:.0%}")
    if iv.low < HIGH_SHARE <= iv.high:
        near.append(f"HIGH's {HIGH_SHARE:.0%}")
    if not near:
        return Judged(severity, False, "")
    if severity == "high":
        severity = "medium"
    why = (
        f"borderline: {iv.metric} {iv.value:.1%} ({iv.low:.1%} … {iv.high:.1%}) is within noise "
        f"of {' and '.join(near)}; never HIGH"
    )
    return Judged(severity, True, why)


def rated(
    value: float,
    per_step: Sequence[float] | None,
    metric: str,
    drift: Drift | None = None,
    threshold: float = 0.0,
    model: Model | None = None,
) -> tuple[EvidenceInterval, Judged]:
    """:func:`share_interval` then :func:`judge`, for a rule whose threshold is not a share
    (``threshold`` 0: only HIGH's boundary can make it borderline)."""
    iv = share_interval(value, list(per_step or []), metric, drift, model)
    return iv, judge(iv, threshold)


EvidenceFn = Callable[[Profile], EvidenceInterval | None]
_EVIDENCE: dict[str, EvidenceFn] = {}


def evidence_of(finding_id: str) -> Callable[[EvidenceFn], EvidenceFn]:
    """Register the function that measures a rule's main evidence on any Profile, whether or
    not the rule fired: its interval, or None where the rule's other conditions (counts, the kind
    of document) do not hold, so that a missing finding is missing for another reason than its
    share. ``gpuopt check`` reads it for a baseline that lacks the finding."""

    def deco(fn: EvidenceFn) -> EvidenceFn:
        _EVIDENCE[finding_id] = fn
        return fn

    return deco


def measure(profile: Profile, finding_id: str) -> EvidenceInterval | None:
    """The main evidence of ``finding_id`` in ``profile`` (None: not measurable there)."""
    import gpuopt.findings.rules  # noqa: F401  (importing the modules registers them)

    fn = _EVIDENCE.get(finding_id)
    return fn(profile) if fn is not None else None
