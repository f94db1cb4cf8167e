"""Findings that do not flicker: a rule's evidence with its interval, and one policy for all.

A share of step time measured on one run is a noisy number: the per-step values it comes from
vary within the run, and a second run of the same code lands elsewhere (its neighbours' load, its
caches). A rule that compared the point value with its threshold would fire in some runs of
identical code and not in others, and a gate that fails on "new HIGH finding" would fail at
random. So a rule that has per-step values of its evidence draws an interval around it, and the
policy is:

* the finding is reported when the value reaches the rule's threshold;
* its severity comes from the interval's **lower bound**, on the shared scale
  (:func:`~gpuopt.findings.estimates.severity_for_share`);
* it is **borderline** when the interval reaches below the rule's threshold, or straddles the
  HIGH boundary: a borderline finding is never HIGH (at most MEDIUM), and says so.

The interval (90%, two-sided) adds up to three parts in quadrature:

* the within-run variation of the per-step values: Student's t interval of their mean, with the
  exact quantile at every number of steps (:func:`~gpuopt.stats.t.t_quantile`: three steps give
  a wide one);
* a run-to-run drift (:func:`drift_of`), a normal term as in ``gpuopt check``'s intervals:
  :data:`SHARE_DRIFT` on a quiet machine, plus :data:`BUSY_DRIFT` per unit of the run's threads'
  wait for a core (``utilization.cpu.run_delay_share``) times the other processes' busy cores
  (at most one). The steps of one run share the neighbours' load of that moment, so on a busy
  machine identical runs' shares move far more than their steps' spread says;
* for a share the recorder measured at one site (a loop's lines, ``launch-bound``'s dispatch
  share), the error of the recorder's own cost, which the assembly subtracts from the site's
  time with a per-op estimate (:func:`recorder_model`). Where a site's ops are tiny that cost is
  many times the site's own time, and what is left of it is mostly the estimate's error: a loop
  of tiny ops is borderline, never HIGH, whatever its point share; a loop of few, large ops
  keeps a narrow interval.

``gpuopt check`` compares findings by these intervals: a HIGH finding absent from the baseline
fails only when its interval lies above the baseline's evidence.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from msgspec import Struct

from gpuopt.findings.estimates import severity_for_share
from gpuopt.model.profile import EvidenceInterval, Profile, Severity
from gpuopt.stats.bootstrap import LEVEL
from gpuopt.stats.t import Z90, t_quantile
from gpuopt.units import num

HIGH_SHARE = 0.25  # severity_for_share's HIGH boundary
# The run-to-run drift of a share of step time on a quiet machine (standard deviation, in points
# as a fraction): benchmarks/bench_stability.py's "evidence sd" column over identical runs
SHARE_DRIFT = 0.02
# The drift added per unit of the run's threads' wait for a core (a share of their runnable time),
# scaled by other processes' busy cores (at most 1): 21pt more at an 85% wait, where identical
# runs under a load of 5-15 on 2 cores spread by up to 18pt (sd, bench_stability)
BUSY_DRIFT = 0.25
# The least relative error assumed of the recorder's per-op cost estimate in a window (its run's
# own measured miss counts when larger): it missed by 20-95% over 200 runs of 10 scripts
# (benchmarks/bench_stability.py's "recorder miss" column)
RECORDER_ERR_FLOOR = 0.10


class Drift(Struct, frozen=True):
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


class Model(Struct, frozen=True):
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
    and it can all land at one site (examples/ragged_steps.py: a miss of 44-71% at a cost of
    0.4-0.6 steps, in a per-sample loop that takes 48% of the step). None where the run did not
    measure the recorder's cost."""
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
    within = 0.0
    if n >= 2:
        import statistics  # 5-10 ms to import, and only a few rules' evidence needs it

        within = t_quantile((1 + LEVEL) / 2, n - 1) * statistics.stdev(xs) / math.sqrt(n)
    half = math.hypot(within, Z90 * drift.value, model.half if model else 0.0)
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


class Judged(Struct, frozen=True):
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
