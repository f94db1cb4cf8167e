"""Findings that do not flicker: a rule with per-step evidence draws an interval; its
severity comes from the lower bound; within noise of its threshold or of HIGH's it is borderline
and never HIGH; gpuopt check fails on a new HIGH finding only when the evidence clearly moved."""

from __future__ import annotations

import itertools
import math
import random
import statistics
from pathlib import Path

import pytest
from gate_support import run

from gpuopt.findings.engine import evaluate as findings_of
from gpuopt.findings.evidence import SHARE_DRIFT, Drift, judge, measure, share_interval
from gpuopt.gate.check import Thresholds, evaluate
from gpuopt.model.profile import Finding, Profile
from gpuopt.report.findings import evidence_summary

ANY = ("a", "b")


def test_the_interval_combines_the_steps_spread_and_the_drift() -> None:
    flat = share_interval(0.4, [0.4] * 30, "x")
    assert flat.low == pytest.approx(0.4 - 1.645 * SHARE_DRIFT, abs=1e-3)
    spread = share_interval(0.4, [0.3, 0.5, 0.4], "x")  # 3 steps: a wide Student-t interval
    assert spread.low < 0.3 and spread.high > 0.5 and spread.steps == 3
    assert share_interval(0.99, [0.99, 0.99], "x").high == 1.0  # clipped


@pytest.mark.parametrize(
    ("n", "t"), [(3, 2.919986), (11, 1.812461), (31, 1.697261), (61, 1.670649)]
)
def test_the_steps_part_is_students_t_at_every_number_of_steps(n: int, t: float) -> None:
    """Over 11 steps or more too: the normal's 1.645 there would make the interval too narrow."""
    steps = [0.3 + 0.1 * (i % 2) for i in range(n)]
    sd = statistics.stdev(steps)
    iv = share_interval(0.35, steps, "x", Drift(0.0))
    assert (iv.high - iv.low) / 2 == pytest.approx(t * sd / math.sqrt(n), abs=1e-4)


@pytest.mark.parametrize(
    ("value", "steps", "severity", "borderline"),
    [
        (0.60, [0.60] * 20, "high", False),  # clear of every boundary
        (0.27, [0.27] * 20, "medium", True),  # within noise of HIGH's 25%: never HIGH
        (0.31, [0.25, 0.37, 0.31], "medium", True),  # 3 noisy steps near the 30% threshold
        (0.15, [0.15] * 20, "medium", False),
        (0.11, [0.11] * 20, "low", True),  # within noise of the 10% threshold: the low end
    ],
)
def test_judge(value: float, steps: list[float], severity: str, borderline: bool) -> None:
    threshold = 0.30 if value == 0.31 else 0.10
    j = judge(share_interval(value, steps, "data_wait_share"), threshold)
    assert (j.severity, j.borderline) == (severity, borderline)
    assert ("never HIGH" in j.why) == borderline


def _waits(profile: Profile, shares: list[float], step_s: float = 0.02) -> Profile:
    for r, share in zip(profile.steps.series[2:], shares, strict=True):
        r.time_s, r.data_wait_s = step_s, share * step_s
    profile.breakdown.data_wait = sum(shares) / len(shares)
    return profile


def test_dataloader_bound_near_high_is_borderline_medium() -> None:
    rng = random.Random(3)
    near = _waits(run([0.02] * 32), [0.26 + rng.uniform(-0.08, 0.08) for _ in range(30)])
    (f,) = findings_of(near, only={"dataloader-bound"})
    assert f.severity == "medium" and f.borderline is True
    assert f.interval.low < 0.25 < f.interval.high
    assert "borderline: data wait share 26" in evidence_summary(f)  # every report says so
    clear = _waits(run([0.02] * 32), [0.6 + rng.uniform(-0.08, 0.08) for _ in range(30)])
    (g,) = findings_of(clear, only={"dataloader-bound"})
    assert g.severity == "high" and g.borderline is False and g.interval.low > 0.25


def _dispatch(profile: Profile, per_step: list[float]) -> Profile:
    d = profile.dispatch
    d.ops_per_step, d.tiny_ops_per_step = 400, 380
    d.step_time_us, d.mean_op_us, d.between_ops_us_per_step = 10_000.0, 5.0, 2000.0
    d.host_dispatch_share_steps = per_step
    d.host_dispatch_share = sorted(per_step)[len(per_step) // 2]
    return profile


def test_launch_bound_at_its_threshold_is_borderline_never_high() -> None:
    """A share near launch-bound's 30% is borderline MEDIUM, so identical runs do not flicker
    between HIGH and not; HIGH needs the whole interval above 30%."""
    (f,) = findings_of(_dispatch(run([0.01] * 12), [0.29, 0.33, 0.31]), only={"launch-bound"})
    assert f.severity != "high" and f.borderline is True
    (g,) = findings_of(_dispatch(run([0.01] * 12), [0.62, 0.64, 0.63]), only={"launch-bound"})
    assert g.severity == "high" and g.borderline is False


def test_three_tight_window_steps_just_past_the_threshold_are_not_high() -> None:
    """bench_stability, 20 identical runs of segmentation_loops: the dispatch share read 14-33%
    (sd 3.6pt, not the 2pt of other shares), absent in most runs; three window steps at 33-35%
    made a HIGH finding in 2 of them. With the dispatch share's own measured drift (4pt) such a
    window is borderline MEDIUM; a share well past HIGH stays HIGH."""
    from gpuopt.findings.rules.host_dispatch import DISPATCH_DRIFT

    assert DISPATCH_DRIFT > SHARE_DRIFT
    (f,) = findings_of(_dispatch(run([0.01] * 12), [0.34, 0.345, 0.35]), only={"launch-bound"})
    assert f.severity == "medium" and f.borderline
    assert f.interval is not None and "a 4pt run-to-run drift" in f.interval.covers
    (g,) = findings_of(_dispatch(run([0.01] * 12), [0.46, 0.47, 0.46]), only={"launch-bound"})
    assert g.severity == "high" and not g.borderline


def test_a_window_step_the_subtraction_emptied_does_not_unmake_a_high_dispatch_finding() -> None:
    """examples/index_loops.py, 2 of 20 identical runs: one window step's dispatch share read 0%
    (the recorder's per-op cost estimate took all of its tiny ops' time), [0.0, 0.54, 0.36]: a
    borderline LOW launch-bound where 18 runs said HIGH. 4,700 tiny ops at the 1.13 us a trivial
    op call costs without the recorder are at least 73% of a 7.3 ms step: HIGH. Without the
    calibration the same steps stay borderline."""
    from gpuopt.findings.rules.host_dispatch import dispatch_floor

    def lb(calibrated: float | None) -> Finding:
        p = _dispatch(run([0.0073] * 12), [0.0, 0.54, 0.36])
        p.dispatch.ops_per_step, p.dispatch.tiny_ops_per_step = 4900, 4700
        p.dispatch.step_time_us = 7300.0
        p.steps.time_s.median = 0.0073
        if calibrated is not None:
            p.dispatch.calibrated_op_us = calibrated
        (f,) = findings_of(p, only={"launch-bound"})
        return f

    unknown = lb(None)
    assert unknown.severity != "high" and unknown.borderline is True
    floored = lb(1.13)
    assert floored.severity == "high" and floored.borderline is False
    assert floored.interval.low == pytest.approx(4700 * 1.13 / 7300, abs=1e-3)
    assert "trivial op call" in floored.interval.covers
    p = _dispatch(run([0.01] * 12), [0.62, 0.64, 0.63])
    p.dispatch.calibrated_op_us, p.steps.time_s.median = 1.0, 0.01
    assert dispatch_floor(p) == pytest.approx(380 * 1.0 / 10_000)  # below: changes nothing
    (g,) = findings_of(p, only={"launch-bound"})
    assert g.interval.low > 0.5


def _with_findings(p: Profile) -> Profile:
    p.findings = findings_of(p)
    return p


def _finding_gates(base: list[Profile], cand: list[Profile]) -> list[str]:
    gates = evaluate(base, cand, Thresholds(gates=frozenset({"findings"})))
    return [g.verdict for g in gates]


def test_identical_runs_near_the_threshold_never_fail_the_gate() -> None:
    """Twenty runs of one step whose dispatch share wanders around launch-bound's 30% and HIGH's
    boundary: the findings differ from run to run (absent, borderline, HIGH), yet no pair, either
    way round, fails on a new HIGH finding (a gate that compared labels would fail every pair
    where one run drew HIGH and the other did not)."""
    rng = random.Random(7)
    runs = [
        _with_findings(_dispatch(run([0.01] * 12), [0.35 + rng.gauss(0, 0.025) for _ in range(3)]))
        for _ in range(20)
    ]
    labels = {
        next(((f.severity, f.borderline) for f in p.findings if f.id == "launch-bound"), None)
        for p in runs
    }
    assert ("high", False) in labels and len(labels) >= 2, labels
    pairs = [
        g
        for a, b in itertools.permutations(runs, 2)
        for g in evaluate([a], [b], Thresholds(gates=frozenset({"findings"})))
    ]
    assert pairs  # pairs where one run was HIGH and the other not
    assert all(g.verdict == "pass" for g in pairs)
    # ... and the gate said why each passed
    assert all("within noise, not clearly moved" in g.detail for g in pairs)


def test_a_new_high_finding_whose_evidence_clearly_moved_fails() -> None:
    base = _with_findings(_dispatch(run([0.01] * 12), [0.05, 0.06, 0.05]))  # measured, low
    cand = _with_findings(_dispatch(run([0.01] * 12), [0.62, 0.64, 0.63]))
    gates = evaluate([base], [cand], Thresholds(gates=frozenset({"findings"})))
    (gate,) = gates
    assert gate.verdict == "fail" and gate.baseline == "absent"  # its evidence: measured
    assert "clearly moved" in gate.detail and "host dispatch share" in gate.detail


def test_a_baseline_where_the_evidence_cannot_be_measured_keeps_the_label_rule() -> None:
    """No recorder in the baseline (no ops counted): the finding is new by its label."""
    cand = _with_findings(_dispatch(run([0.01] * 12), [0.62, 0.64, 0.63]))
    base = run([0.01] * 12)
    base.dispatch.ops_per_step = None
    assert measure(base, "launch-bound") is None
    assert _finding_gates([base], [cand]) == ["fail"]


def test_a_finding_without_an_interval_is_judged_by_its_label() -> None:
    cand = run([0.1] * 20)
    cand.findings = [
        Finding(id="pageable-h2d", severity="high", title="t", evidence={}, fix="", site="a:1")
    ]
    assert _finding_gates([run([0.1] * 20)], [cand]) == ["fail"]


def _loop(share: float, steps: list[float]) -> dict[str, object]:
    return {
        "site": "l.py:4",
        "iterations_per_step": 80,
        "ops_per_step": 480,
        "indexing_ops_per_step": 160,
        "ops_per_iteration": 6,
        "time_us_per_step": 9000,
        "time_share": share,
        "time_share_steps": steps,
    }


def test_window_findings_draw_their_interval_from_the_recorded_steps() -> None:
    """loop-indexing (and ragged-batches, the copies, sync-in-step on a GPU) read each recorded
    step's share: a loop at 27% whose three steps spread 20-35% is never HIGH."""
    import msgspec

    def one(share: float, steps: list[float]) -> Finding:
        doc = msgspec.convert({"loops": [_loop(share, steps)]}, Profile)
        (f,) = findings_of(doc, only={"loop-indexing"})
        return f

    near = one(0.27, [0.20, 0.35, 0.26])
    assert near.severity == "medium" and near.borderline is True
    assert near.interval.metric == "loop_share" and near.interval.steps == 3
    clear = one(0.60, [0.58, 0.61, 0.60])
    assert clear.severity == "high" and clear.borderline is False


def _recorded(share: float, per_op_us: float, ops: int, raw_us: float) -> Profile:
    """A loop at ``share`` of a 6.5 ms step whose three recorded steps agree, in a window whose
    recorder cost ``per_op_us`` an op (``ops`` of them a step: all the loop's) and whose steps
    took ``raw_us`` each."""
    import msgspec

    loop = {**_loop(share, [share - 0.01, share, share + 0.01]), "ops_per_step": ops}
    doc = msgspec.convert({"loops": [loop]}, Profile)
    doc.steps.time_s.median = 0.0065
    doc.dispatch.ops_per_step = float(ops)
    doc.dispatch.recorder_overhead_us_per_op = per_op_us
    doc.dispatch.step_time_us_raw = raw_us
    return doc


def test_a_loop_whose_share_is_mostly_the_recorders_cost_is_never_high() -> None:
    """examples/index_loops.py: 1792 tiny ops at ~25 us of recorder cost each in a 6.5 ms step
    (the window's steps 20x the unrecorded ones), the recorder's estimate off by 27-54%: its
    loop read 26-83% in identical runs. Whatever the point share, such a loop is borderline;
    the same share measured where the recorder's cost is small stays HIGH."""
    from gpuopt.findings.evidence import RECORDER_ERR_FLOOR, recorder_miss

    heavy = _recorded(0.60, per_op_us=25.0, ops=1792, raw_us=6500 + 1792 * 25.0 / 0.7)
    assert recorder_miss(heavy) == pytest.approx(0.30, abs=0.01)
    (f,) = findings_of(heavy, only={"loop-indexing"})
    assert f.severity == "medium" and f.borderline is True
    assert f.interval.low < 0.25 and "recorder's cost" in f.interval.covers
    light = _recorded(0.60, per_op_us=25.0, ops=20, raw_us=6500 + 20 * 25.0)
    assert recorder_miss(light) == pytest.approx(0.0, abs=1e-9)  # the floor applies
    (g,) = findings_of(light, only={"loop-indexing"})
    assert g.severity == "high" and g.borderline is False
    assert g.interval.low > 0.6 - 0.05 and RECORDER_ERR_FLOOR > 0


def test_a_loop_in_a_window_whose_recorder_cost_far_more_than_estimated_is_never_high() -> None:
    """examples/ragged_steps.py: a per-sample loop that takes 48% of the step timed by hand read
    82-100% (HIGH in 18 of 20 identical runs, MEDIUM in 2): its ops' estimated recorder cost was
    0.4-0.6 steps, but the window cost 2-6 steps more than the whole estimate, and where that
    missed cost lands is not measured. The interval covers all of it: never HIGH; the same
    loop where the estimate covered the window's cost stays HIGH."""
    from gpuopt.findings.evidence import recorder_missed

    cost = 200 * 5.0  # 200 ops at 5 us: 0.15 of the 6.5 ms step
    missed = _recorded(0.85, per_op_us=5.0, ops=200, raw_us=6500 + cost + 3 * 6500)
    assert recorder_missed(missed) == pytest.approx(3.0)
    (f,) = findings_of(missed, only={"loop-indexing"})
    assert f.severity != "high" and f.borderline is True
    assert f.interval.low == 0.0 and "may all have landed at the site" in f.interval.covers
    covered = _recorded(0.85, per_op_us=5.0, ops=200, raw_us=6500 + cost)
    assert recorder_missed(covered) == 0.0
    (g,) = findings_of(covered, only={"loop-indexing"})
    assert g.severity == "high" and g.borderline is False


def test_launch_bound_through_a_recorder_that_cost_the_steps_many_times_is_not_high() -> None:
    """examples/ragged_steps.py: 473 ops a step, the recorder ~2 steps' worth of them, its
    estimate off by 40-70%: the dispatch share read 36-98% in identical runs, absent in 1 of 20
    where the majority was HIGH. The recorder's error enters the interval (as at a loop's site),
    so it is borderline in every run; a step of tiny ops whose recorder-free floor (tiny ops x a
    trivial op call's cost) clears HIGH stays HIGH (examples/index_loops.py)."""

    def doc(calibrated: float) -> Profile:
        p = _dispatch(run([0.003] * 12), [0.58, 0.6, 0.62])
        p.steps.time_s.median = 0.003
        d = p.dispatch
        d.ops_per_step, d.tiny_ops_per_step, d.step_time_us = 473, 410, 3000.0
        d.recorder_overhead_us_per_op, d.calibrated_op_us = 12.0, calibrated
        d.step_time_us_raw = 3000 + 473 * 12.0 / 0.4  # the estimate missed 60%
        return p

    (f,) = findings_of(doc(1.1), only={"launch-bound"})
    assert f.severity != "high" and f.borderline is True
    assert "recorder's cost" in f.interval.covers
    (g,) = findings_of(doc(2.2), only={"launch-bound"})  # 410 x 2.2 us: 30% of the step
    assert g.interval.low == pytest.approx(410 * 2.2 / 3000, abs=1e-3)
    assert g.severity == "high" and g.borderline is False


def test_the_recorder_keeps_each_steps_share_of_loops(tmp_path: Path) -> None:
    import torch
    from probes_support import load, record

    mod = load("planted_loops.py")
    x = torch.randn(16, 8)
    doc = record(lambda i: mod["scale_rows"](x), steps=5, tmp_path=tmp_path)
    assert doc["loops"]
    for loop in doc["loops"]:
        assert len(loop["time_share_steps"]) == 3  # one per recorded step
    assert len(doc["dispatch"]["op_time_share_steps"]) == 3


def test_a_run_the_machine_slowed_draws_a_wider_interval() -> None:
    """Under a neighbour's load the shares of identical runs moved far more than their steps'
    spread (16%, 29%, 36% of data wait in three runs of examples/io_loader.py): a run whose
    threads waited for a core while others held the cores says so, and its 36% is borderline,
    not HIGH; on a quiet machine the same steps are HIGH."""
    from gate_support import loaded

    from gpuopt.findings.evidence import BUSY_DRIFT, drift_of

    steps = [0.36 + (0.01 if i % 2 else -0.01) for i in range(30)]
    quiet = loaded(_waits(run([0.02] * 32), steps), 0.05, run_delay=0.01)
    busy = loaded(_waits(run([0.02] * 32), steps), 1.6, run_delay=0.85)
    assert drift_of(quiet).value == SHARE_DRIFT and drift_of(quiet).busy == ""
    assert drift_of(busy).value == pytest.approx(SHARE_DRIFT + BUSY_DRIFT * 0.85)
    (q,) = findings_of(quiet, only={"dataloader-bound"})
    (b,) = findings_of(busy, only={"dataloader-bound"})
    assert q.severity == "high" and q.borderline is False
    assert b.severity != "high" and b.borderline is True
    assert "busy machine" in b.interval.covers
    assert "(measured on a busy machine): never HIGH" in evidence_summary(b)


@pytest.mark.parametrize("rule", ["launch-bound", "loop-indexing"])
def test_every_window_rule_widens_its_interval_on_a_busy_machine(rule: str) -> None:
    """The busy machine's drift reaches the recorder's window rules too, not only the data wait:
    a share of 40% whose three steps agree is HIGH on a quiet run, and borderline (never HIGH) on
    a run whose threads waited 85% of their time for a core while others held 1.6 cores."""
    import msgspec
    from gate_support import loaded

    steps = [0.39, 0.41, 0.40]

    def one(wait: float, others: float) -> Finding:
        if rule == "launch-bound":
            doc = _dispatch(run([0.01] * 12), steps)
        else:
            doc = msgspec.convert({"loops": [_loop(0.40, steps)]}, Profile)
        (f,) = findings_of(loaded(doc, others, run_delay=wait), only={rule})
        return f

    quiet, busy = one(0.01, 0.05), one(0.85, 1.6)
    assert quiet.severity == "high" and quiet.borderline is False
    assert "busy machine" not in quiet.interval.covers
    assert busy.severity != "high" and busy.borderline is True
    assert "busy machine" in busy.interval.covers
    assert busy.interval.high - busy.interval.low > 4 * (quiet.interval.high - quiet.interval.low)


def test_a_new_high_finding_against_a_busy_baseline_is_inconclusive() -> None:
    """bench_check's vae: a baseline that ran on a busy machine (its compute 10x slower) waited
    6% of its step on data; the quiet candidate, the same code, 40%: "new HIGH finding
    dataloader-bound" failed. A share of the step's time measured on a busy side cannot be
    compared: inconclusive, with why; on two quiet sides the same pair fails."""
    from gate_support import loaded

    from gpuopt.gate.runs import Run, timed_runs

    base = _with_findings(loaded(_waits(run([0.2] * 32), [0.06] * 30, 0.2), 0.9, run_delay=0.5))
    cand = _with_findings(loaded(_waits(run([0.02] * 32), [0.40] * 30), 0.0, run_delay=0.0))
    assert "dataloader-bound" in {f.id for f in cand.findings if f.severity == "high"}
    timed = timed_runs([Run(Path("a"), base)], [Run(Path("b"), cand)])
    assert timed.inconclusive == "the baseline ran on a busy machine"
    th = Thresholds(gates=frozenset({"findings"}))
    (gate,) = evaluate([base], [cand], th, busy=timed.inconclusive)
    assert gate.verdict == "inconclusive" and "busy machine" in gate.detail
    quiet = _with_findings(loaded(_waits(run([0.02] * 32), [0.06] * 30), 0.0, run_delay=0.0))
    (gate,) = evaluate([quiet], [cand], th)
    assert gate.verdict == "fail"
