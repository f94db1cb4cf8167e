"""gpuopt check: the gates over two sides of runs, the noise model, busy machines,
per-rank GPU gates and the command's exit codes. Synthetic runs with known per-step times: no
test depends on this machine's speed."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import msgspec
import pytest
from conftest import run_gpuopt
from gate_support import finding, loaded, noisy, run, with_nvml, with_ranks, write

from gpuopt.errors import GpuoptError
from gpuopt.gate.check import ONE_RUN_DRIFT, Thresholds, evaluate, exit_code, parse_fraction
from gpuopt.gate.noise import RunValues, compare_runs, one_side
from gpuopt.gate.runs import Run, timed_runs


def _gate(gates, name):  # type: ignore[no-untyped-def]
    return next(g for g in gates if g.metric == name)


STEP = "step time (median)"


def test_identical_distributions_pass_and_a_planted_10_percent_fails() -> None:
    """With the drift given (the user's measured 1%), a 10% regression at one run a side
    fails; identical code passes."""
    base = run(noisy(0.100, seed=1))
    same = run(noisy(0.100, seed=2))
    slower = run(noisy(0.110, seed=3))
    th = Thresholds(step_time_noise_given=True)
    assert _gate(evaluate(base, same, th), STEP).verdict == "pass"
    gate = _gate(evaluate(base, slower, th), STEP)
    assert gate.verdict == "fail" and "interval" in gate.detail
    assert gate.interval is not None and gate.interval.scale == "ratio"
    assert "run-to-run drift 1.0% (the floor" in gate.interval.covers
    assert exit_code(evaluate(base, slower, th), strict=False) == 1


def test_one_run_a_side_uses_the_measured_drift_and_is_never_a_guessed_regression() -> None:
    """Identical runs on a 2-core VM differ by 10-15%; one run a side cannot estimate that, and
    a 1% floor makes a +13.6% identical pair a regression. Without a drift given,
    one run a side assumes the drift of this kind of machine: a change within it is
    inconclusive ("run 2+ a side"), one far beyond it still fails, and three runs a side measure
    the drift themselves."""
    base = run(noisy(0.100, seed=1))
    pair = _gate(evaluate(base, run(noisy(0.1136, seed=3)), Thresholds()), STEP)
    assert pair.verdict == "inconclusive" and "run 2+ a side" in pair.detail
    assert pair.interval is not None and f"drift {ONE_RUN_DRIFT:.1%} (the floor" in (
        pair.interval.covers
    )
    assert _gate(evaluate(base, run(noisy(0.101, seed=3)), Thresholds()), STEP).verdict == "pass"
    far = _gate(evaluate(base, run(noisy(0.300, seed=3)), Thresholds()), STEP)
    assert far.verdict == "fail"
    three = [run(noisy(0.100, seed=s)) for s in (1, 2, 4)]
    slower = [run(noisy(0.1136, seed=s)) for s in (5, 6, 7)]
    assert _gate(evaluate(three, slower, Thresholds()), STEP).verdict == "fail"


def test_the_floor_widens_the_interval_by_the_drift_it_assumes() -> None:
    """Steady steps (±0.5%) 6% slower: the within-run interval alone would exclude +5%; a 1%
    run-to-run floor on each side brings the low end under it: not shown either way, so
    inconclusive — never a silent pass of an estimate above the threshold."""
    base = run(noisy(0.100, spread=0.005, seed=1))
    cand = run(noisy(0.106, spread=0.005, seed=2))
    given_1 = Thresholds(step_time_noise_given=True)
    gate = _gate(evaluate(base, cand, given_1), STEP)
    assert gate.verdict == "inconclusive" and gate.interval is not None
    assert gate.interval.low < 1.05 < gate.interval.estimate
    assert "add runs a side" in gate.detail
    tight = _gate(
        evaluate(base, cand, Thresholds(step_time_noise=0.0, step_time_noise_given=True)), STEP
    )
    assert tight.verdict == "fail"


def test_repeated_runs_estimate_the_drift_between_them() -> None:
    """Three runs a side whose medians drift by ±4%: the interval uses that spread, not the
    floor, so a 6% difference of means is no regression, while 15% still is."""

    def side(median: float, seed: int) -> list[RunValues]:
        shifts = [0.96, 1.0, 1.04]
        return [
            RunValues(tuple(noisy(median * s, spread=0.01, seed=seed + i)))
            for i, s in enumerate(shifts)
        ]

    base, cand, far = side(0.1, 0), side(0.106, 9), side(0.115, 20)
    iv = compare_runs(base, cand, median=True, log=True, floor=0.01)
    assert iv.drift_source == "runs" and iv.drift > 0.02
    assert iv.low < 1.05 and "estimated from the spread of 3 + 3 runs" in iv.covers()
    assert compare_runs(base, far, median=True, log=True, floor=0.01).low > 1.05


def test_the_interval_is_seeded() -> None:
    a, b = [RunValues(tuple(noisy(0.1, seed=1)))], [RunValues(tuple(noisy(0.1, seed=2)))]
    assert compare_runs(a, b, median=True, log=True, floor=0.01) == compare_runs(
        a, b, median=True, log=True, floor=0.01
    )


def test_one_side_bounds_a_value_from_its_samples() -> None:
    iv = one_side([RunValues(units=(0.5, 0.52, 0.48, 0.5, 0.51, 0.49, 0.5, 0.5))], floor=0.01)
    assert iv.low < 0.5 < iv.high and iv.high - iv.low < 0.06


def test_too_few_steps_is_inconclusive_and_strict_fails_it() -> None:
    base, cand = run([0.1] * 5), run([0.2] * 5)
    gates = evaluate(base, cand, Thresholds())
    assert _gate(gates, STEP).verdict == "inconclusive"
    assert "at least 8" in _gate(gates, STEP).detail
    assert exit_code(gates, strict=False) == 0 and exit_code(gates, strict=True) == 1


def test_short_runs_add_up_across_repeats() -> None:
    """Five measured steps a run is too few; three runs a side are enough."""
    base = [run(noisy(0.1, n=7, seed=i)) for i in range(3)]
    cand = [run(noisy(0.1, n=7, seed=10 + i)) for i in range(3)]
    assert _gate(evaluate(base, cand, Thresholds()), STEP).verdict == "pass"


def test_data_wait_with_one_run_a_side_assumes_its_measured_drift() -> None:
    """bench_check: an identical vae pair (dataloader-bound, data wait ~40% of the step) failed
    the data-wait gate with one run a side under the 1pt floor; identical runs' data-wait share
    moves 1.6-2.7pt (sd). One run a side assumes 3pt: such a pair passes, a 20pt rise fails."""
    from gpuopt.gate.check import DATA_WAIT_DRIFT

    times = [0.1] * 30
    base = run(times, [0.040] * 30)
    same = run(times, [0.046] * 30)  # +6pt: what an identical vae pair did
    gate = _gate(evaluate(base, same, Thresholds()), "data wait (share of step)")
    assert gate.verdict == "pass", gate.detail
    assert f"run-to-run drift {DATA_WAIT_DRIFT * 100:.1f}pt (the floor" in gate.interval.covers
    assert (
        _gate(
            evaluate(base, run(times, [0.06] * 30), Thresholds()), "data wait (share of step)"
        ).verdict
        == "fail"
    )


def test_data_wait_share_in_points() -> None:
    times = [0.1] * 30
    base = run(times, [0.02] * 30)
    cand = run(times, [0.06] * 30)  # 20% -> 60% of the step
    gate = _gate(evaluate(base, cand, Thresholds()), "data wait (share of step)")
    assert gate.verdict == "fail" and gate.change == "+40.0pt"


def test_exact_counters_fail_on_any_increase_at_the_site_that_grew() -> None:
    base = run([0.1] * 20, syncs=1.0)
    cand = run([0.1] * 20, syncs=1.0)
    cand.syncs.append(base.syncs[0].__class__(kind="item", site="train.py:30", count_per_step=1))
    gate = _gate(evaluate(base, cand, Thresholds()), "syncs per step")
    assert (gate.verdict, gate.baseline, gate.candidate) == ("fail", "1", "2")
    assert gate.site == "train.py:30" and gate.id == "syncs_per_step"
    assert gate.detail == "counted, not timed"  # one run a side: nothing varies between runs


def test_counters_over_repeats_compare_least_with_greatest() -> None:
    base = [run([0.1] * 20, syncs=1.0), run([0.1] * 20, syncs=2.0)]
    cand = [run([0.1] * 20, syncs=2.0), run([0.1] * 20, syncs=3.0)]
    gate = _gate(evaluate(base, cand, Thresholds()), "syncs per step")
    assert gate.verdict == "pass" and "varies between runs" in gate.detail


def test_new_high_findings_fail_unless_allowed() -> None:
    base, cand = run([0.1] * 20), run([0.1] * 20)
    cand.findings = [finding("dataloader-bound", site="a:1")]
    (gate,) = [g for g in evaluate(base, cand, Thresholds()) if g.metric.startswith("new HIGH")]
    assert gate.verdict == "fail" and gate.site == "a:1" and gate.id == "finding:dataloader-bound"
    allowed = Thresholds(allow=frozenset({"dataloader-bound"}))
    assert exit_code(evaluate(base, cand, allowed), strict=False) == 0


def test_a_finding_in_only_some_candidate_runs_is_not_new() -> None:
    base = [run([0.1] * 20)]
    cand = [run([0.1] * 20), run([0.1] * 20)]
    cand[0].findings = [finding("sync-in-step")]
    assert not [g for g in evaluate(base, cand, Thresholds()) if g.metric.startswith("new HIGH")]


def test_gpu_idle_per_rank_and_min_gpu_util() -> None:
    base = with_ranks(run([0.1] * 20), [0.80, 0.80])
    cand = with_ranks(run([0.1] * 20), [0.80, 0.60])  # rank 1: idle 20% -> 40%
    th = Thresholds(min_gpu_util=0.7)
    gates = evaluate(base, cand, th)
    assert _gate(gates, "GPU idle, rank 0 (share of time)").verdict == "pass"
    idle = _gate(gates, "GPU idle, rank 1 (share of time)")
    assert idle.verdict == "fail" and idle.rank == "rank 1" and idle.change == "+20.0pt"
    assert _gate(gates, "GPU utilization, rank 0 (at least)").verdict == "pass"
    low = _gate(gates, "GPU utilization, rank 1 (at least)")
    assert low.verdict == "fail" and low.baseline == "70%" and low.candidate == "60.0%"


def test_gpu_idle_from_nvml_samples_has_an_interval() -> None:
    base = with_nvml(run([0.1] * 20), [90.0, 92.0, 88.0, 91.0] * 5)
    cand = with_nvml(run([0.1] * 20), [70.0, 72.0, 68.0, 71.0] * 5)
    gate = _gate(evaluate(base, cand, Thresholds()), "GPU idle (share of time)")
    assert gate.verdict == "fail" and gate.rank == "GPU 0"
    assert gate.interval is not None and "20 + 20 steps resampled" in gate.interval.covers
    assert "NVML samples" in gate.detail


def test_gpu_gates_not_measured_on_a_cpu_run() -> None:
    gates = evaluate(run([0.1] * 20), run([0.1] * 20), Thresholds(min_gpu_util=0.5))
    assert _gate(gates, "GPU idle (share of time)").verdict == "not measured"
    assert _gate(gates, "GPU utilization (at least)").verdict == "not measured"
    assert exit_code(gates, strict=True) == 0


def _runs(*profiles):  # type: ignore[no-untyped-def]
    return [Run(Path(f"r{i}"), p) for i, p in enumerate(profiles)]


def test_a_run_on_a_busy_machine_is_left_out_when_each_side_keeps_a_quiet_one() -> None:
    quiet = [loaded(run(noisy(0.1, seed=i)), 0.05) for i in range(4)]
    busy = loaded(run(noisy(0.3, seed=9)), 0.95)
    base, cand = _runs(quiet[0], quiet[1]), _runs(quiet[2], busy, quiet[3])
    timed = timed_runs(base, cand)
    assert timed.inconclusive is None and len(timed.candidate) == 2
    assert "busy machine" in timed.notes[0] and "0.95 of 2 cores" in timed.notes[0]


def test_a_side_that_ran_on_a_busy_machine_makes_the_timed_gates_inconclusive() -> None:
    base = loaded(run(noisy(0.1, seed=1)), 0.05)
    cand = loaded(run(noisy(0.2, seed=2)), 0.95)
    timed = timed_runs(_runs(base), _runs(cand))
    assert timed.inconclusive == "the candidate ran on a busy machine"
    gates = evaluate(base, cand, Thresholds(), busy=timed.inconclusive, explained=timed.explained)
    assert _gate(gates, STEP).verdict == "inconclusive"
    assert _gate(gates, "syncs per step").verdict == "pass"  # counters are not timed


def test_both_sides_on_a_busy_machine_is_inconclusive() -> None:
    base = loaded(run(noisy(0.1, seed=1)), 0.9)
    cand = loaded(run(noisy(0.1, seed=2)), 0.8)
    timed = timed_runs(_runs(base), _runs(cand))
    assert timed.inconclusive == "the baseline and the candidate ran on a busy machine"


def test_some_load_on_a_machine_with_cores_to_spare_is_not_busy() -> None:
    base = loaded(run(noisy(0.1, seed=1)), 0.05, cpu_count=16)
    cand = loaded(run(noisy(0.1, seed=2)), 4.0, cpu_count=16)
    assert timed_runs(_runs(base), _runs(cand)).inconclusive is None


@pytest.mark.parametrize(("text", "unit", "value"), [("5%", "%", 0.05), ("3pt", "pt", 0.03)])
def test_thresholds_parse(text: str, unit: str, value: float) -> None:
    assert parse_fraction(text, unit) == pytest.approx(value)
    with pytest.raises(GpuoptError, match="expected a number of"):
        parse_fraction("five", unit)


def test_the_command_exits_0_1_2(tmp_path: Path) -> None:
    base = write(tmp_path / "base.json", run(noisy(0.100, seed=1)))
    slower = write(tmp_path / "slow.json", run(noisy(0.300, seed=2)))  # beyond one run's drift
    ok = run_gpuopt("check", str(base), "--baseline", str(base), "--format", "json")
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["schema"] == "gpuopt.check/1" and doc["exit_code"] == 0
    gate = doc["gates"][0]
    assert {"metric", "verdict", "baseline", "candidate", "change", "detail", "site"} <= set(gate)
    assert gate["interval"]["scale"] == "ratio" and doc["verdict"] == "pass"
    bad = run_gpuopt("check", str(slower), "--baseline", str(base))
    assert bad.returncode == 1 and "REGRESSION: step time (median)" in bad.stdout
    assert "intervals include: within-run variation" in bad.stdout
    missing = run_gpuopt("check", str(tmp_path / "nope"), "--baseline", str(base))
    assert missing.returncode == 2 and missing.stderr.startswith("gpuopt: error:")
    assert "Traceback" not in missing.stderr
    odd = run_gpuopt("check", str(base), "--baseline", str(base), "--max-step-time-regression", "x")
    assert odd.returncode == 2 and "expected a number of %" in odd.stderr


def test_a_folder_of_per_rank_traces_is_gated_per_rank(shared_traces: Path) -> None:
    folder = shared_traces / "hta" / "trace_filter"
    r = run_gpuopt("check", str(folder), "--baseline", str(folder), "--format", "json")
    assert r.returncode == 0, r.stderr
    gates = json.loads(r.stdout)["gates"]
    idle = [g for g in gates if g["id"] == "gpu_idle"]
    assert [g["rank"] for g in idle] == ["rank 0", "rank 1"]
    assert all(g["verdict"] == "pass" and g["change"] == "+0.0pt" for g in idle)
    step = next(g for g in gates if g["id"] == "step_time")
    assert step["verdict"] == "inconclusive"  # a trace of one step: too few to judge
    assert {g["id"] for g in gates} >= {"syncs_per_step", "h2d_copies_per_step"}


def test_sub_millisecond_steps_need_three_runs_or_a_stated_floor() -> None:
    """0.25 ms steps drift between runs far beyond the 1% floor: one run on a side is not
    judged, however clear the difference looks; two runs a side (the drift measured) or a larger
    --step-time-noise are. Steps of 1 ms and more are judged as before."""
    base, cand = run(noisy(0.00025, seed=1)), run(noisy(0.00029, seed=2))
    gate = _gate(evaluate(base, cand, Thresholds()), STEP)
    assert gate.verdict == "inconclusive" and "give two runs a side" in gate.detail
    base2, cand2 = [base, run(noisy(0.00025, seed=4))], [cand, run(noisy(0.00029, seed=3))]
    assert _gate(evaluate(base2[:1], cand2, Thresholds()), STEP).verdict == "inconclusive"
    assert _gate(evaluate(base2, cand2, Thresholds()), STEP).verdict == "fail"
    given = Thresholds(step_time_noise=0.08, step_time_noise_given=True)
    wide = _gate(evaluate(base, cand, given), STEP)
    assert wide.interval is not None and "run-to-run drift 8.0%" in wide.interval.covers
    long = _gate(
        evaluate(run(noisy(0.0011, seed=1)), run(noisy(0.0033, seed=2)), Thresholds()), STEP
    )
    assert long.verdict == "fail"


def test_an_estimate_above_the_threshold_is_never_a_silent_pass() -> None:
    """bench_check, 3 runs a side, quiet: a planted 25% sleep whose runs' medians (8.25, 9.64,
    10.21 ms against 6.75, 12.41, 8.20 ms) gave +5.7%, interval -22.9% ... +44.4%, passed.
    Above the threshold but not clearly: inconclusive. Below it: pass."""
    base = [run(noisy(m, seed=i)) for i, m in enumerate((0.00675, 0.01241, 0.00820))]
    cand = [run(noisy(m, seed=9 + i)) for i, m in enumerate((0.00825, 0.00964, 0.01021))]
    gate = _gate(evaluate(base, cand, Thresholds()), STEP)
    assert gate.verdict == "inconclusive" and gate.interval is not None
    assert gate.interval.low < 1.05 < gate.interval.estimate
    same = [run(noisy(m, seed=20 + i)) for i, m in enumerate((0.00675, 0.01241, 0.00820))]
    assert _gate(evaluate(base, same, Thresholds()), STEP).verdict == "pass"


OUTSIDE = "time outside tensor ops (share of step)"


def _outside(named: float, unnamed: float = 0.0, site: str = "train.py:31"):  # type: ignore[no-untyped-def]
    """A run whose window spent ``named`` of its steps outside ops at ``site`` (the gap sampler
    saw it) and ``unnamed`` more that no sample named (a stall of the machine)."""
    from gpuopt.model.records import OutsideSite

    p = run([0.1] * 20)
    d = p.dispatch
    d.step_time_us = 100_000.0  # the window's step, as the measured steps' 100 ms
    d.outside_ops_us_per_step = (named + unnamed) * 100_000.0
    d.outside_ops_share_steps = [named + unnamed] * 3
    d.outside_ops_sites = (
        [
            OutsideSite(
                site=site, frame=site, time_us_per_step=named * 1e5, time_share=named, samples=9
            )
        ]
        if named
        else []
    )
    return p


def test_time_outside_ops_is_a_share_within_each_run() -> None:
    """A planted sleep of 25% of a step cannot be told from the VM's 30% run-to-run
    drift of step time with one run a side; its share of each run's own steps can. Identical
    windows pass, a 20pt rise fails naming the line, a rise within the threshold passes."""
    base = _outside(0.0)
    same = _outside(0.01)
    slept = _outside(0.2)
    th = Thresholds()
    assert _gate(evaluate(base, same, th), OUTSIDE).verdict == "pass"
    gate = _gate(evaluate(base, slept, th), OUTSIDE)
    assert gate.verdict == "fail" and gate.change == "+20.0pt"
    assert "train.py:31" in gate.detail and gate.interval is not None
    from gpuopt.gate.check import OUTSIDE_OPS_DRIFT

    assert f"run-to-run drift {OUTSIDE_OPS_DRIFT * 100:.1f}pt (the floor" in gate.interval.covers
    assert _gate(evaluate(base, _outside(0.04), th), OUTSIDE).verdict == "pass"  # +4pt


def test_a_stall_no_sample_named_is_not_time_outside_ops() -> None:
    """bench_stability: identical runs of ragged_steps read 0% outside ops in most windows and
    31-38% in every step of one (no line named: the process, not the code); of sync_metrics' 0.6
    ms steps, 0-27%. Only the time the sampler named at a line counts: such a candidate passes."""
    stalled = _outside(0.0, unnamed=0.34)
    gate = _gate(evaluate(_outside(0.0), stalled, Thresholds()), OUTSIDE)
    assert gate.verdict == "pass" and gate.candidate == "0.0%"


def _named_by_step(shares: list[float]):  # type: ignore[no-untyped-def]
    """A run whose window steps had ``shares`` of a 100 ms step named outside ops (current
    documents: the named time by step), their mean in the older per-step value."""
    p = _outside(statistics.fmean(shares))
    d = p.dispatch
    d.outside_ops_named_us_steps = [s * 100_000.0 for s in shares]
    d.outside_ops_named_us_per_step = statistics.fmean(shares) * 100_000.0
    return p


def test_a_stall_in_one_window_step_is_not_a_change_in_every_step() -> None:
    """bench_check: by the window steps' mean a quiet identical pair of index_loops fails this
    gate, its candidate's threads waiting 7.3% of their time for a core (every other quiet run of
    200: at most 1.3%). The window's steps, 22x longer with the recorder (143 ms for 6.5 ms), gather
    a stall (a collection, the process descheduled) that the sampler names for its length, and
    that length is read against the step without the recorder: one stalled step of three makes
    a third of a step's stall per step. A regression is in every step: the gate reads the
    steps' median, a planted sleep in every step still fails, a stall in one step passes."""
    th = Thresholds()
    base = _named_by_step([0.0, 0.01, 0.0])
    stalled = _named_by_step([0.0, 0.9, 0.01])  # mean 30%: the per-step mean failed
    gate = _gate(evaluate(base, stalled, th), OUTSIDE)
    assert gate.verdict == "pass" and gate.candidate == "1.0%", gate
    slept = _named_by_step([0.24, 0.26, 0.25])
    gate = _gate(evaluate(base, slept, th), OUTSIDE)
    assert gate.verdict == "fail" and gate.change == "+25.0pt", gate
    older = _outside(0.3)  # a document without the steps keeps the mean
    assert _gate(evaluate(base, older, th), OUTSIDE).verdict == "fail"


def _window(step_s: float, named_s: float):  # type: ignore[no-untyped-def]
    """A run of ``step_s`` steps whose window named ``named_s`` of each outside ops."""
    p = run([step_s] * 20)
    d = p.dispatch
    d.step_time_us, d.outside_ops_us_per_step = step_s * 1e6, named_s * 1e6
    d.outside_ops_named_us_steps = [named_s * 1e6] * 3
    d.outside_ops_named_us_per_step = named_s * 1e6
    return p


def test_time_outside_ops_is_read_against_the_baseline_step() -> None:
    """bench_check: read against each run's own step, a planted sleep of a quarter of vae's step
    is inconclusive in 2 quiet pairs of 20, the VM running the candidate 1.2-1.9x slower, so the
    sleep's share of the candidate's own step falls to ~12pt. The sleep is a fixed time: against
    the baseline's step it is 25pt whatever the machine did to the candidate's ops. The same
    yardstick passes an op-side speed-up that leaves the Python work as it was (its share of the
    shorter step rises 13pt), and Python work that slowed with the machine (1.5x, 30% of the
    baseline's step) is within the step's one-run drift."""
    th = Thresholds()
    gate = _gate(evaluate(_window(0.020, 0.0), _window(0.043, 0.005), th), OUTSIDE)
    assert gate.verdict == "fail" and gate.change == "+25.0pt", gate
    faster = _gate(evaluate(_window(0.100, 0.020), _window(0.060, 0.020), th), OUTSIDE)
    assert faster.verdict == "pass" and faster.change == "+0.0pt", faster
    slowed = _gate(evaluate(_window(0.100, 0.030), _window(0.150, 0.045), th), OUTSIDE)
    assert slowed.verdict == "pass" and slowed.change == "+15.0pt", slowed
    assert slowed.interval is not None and "drift 9.5pt" in slowed.interval.covers, slowed
    assert "shares of the baseline's median step, 100 ms" in slowed.detail, slowed
    own = _window(0.100, 0.030)
    own.dispatch.step_time_us = msgspec.UNSET  # an older document: each run's own step
    gate = _gate(evaluate(_window(0.100, 0.030), own, th), OUTSIDE)
    assert "shares of each run's own step" in gate.detail, gate


def test_time_outside_ops_without_a_window_is_not_measured_and_busy_is_inconclusive() -> None:
    th = Thresholds()
    gate = _gate(evaluate(run([0.1] * 20), run([0.1] * 20), th), OUTSIDE)
    assert gate.verdict == "not measured"
    base, cand = _outside(0.02), _outside(0.4)
    gate = _gate(evaluate(base, cand, th, busy="the candidate ran on a busy machine"), OUTSIDE)
    assert gate.verdict == "inconclusive" and "busy" in gate.detail
    # bench_check: an identical index_loops pair under two spinning neighbours rose 45pt with its
    # threads waiting 40% of their time: a busy side is never judged by this gate
    cand.utilization.cpu.run_delay_share = 0.2
    gate = _gate(evaluate(base, cand, th, busy="the candidate ran on a busy machine"), OUTSIDE)
    assert gate.verdict == "inconclusive"
    off = Thresholds(gates=frozenset({"counters"}))
    assert not [g for g in evaluate(base, cand, off) if g.metric == OUTSIDE]


SLEEPY = """
import time
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(6)])
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(16):
    x = torch.randn(8, 16)
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    SLEEP
"""


def _profiled(script: Path, source: str, out: Path) -> Path:
    """``script`` written with ``source`` and profiled into ``out`` (one real run)."""
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(source)
    proc = run_gpuopt("profile", "--quiet", "-o", str(out), str(script), cwd=out.parent)
    assert proc.returncode == 0, proc.stderr
    return out


def _outside_gate(cand: Path, base: Path) -> tuple[int, dict]:  # type: ignore[type-arg]
    """``gpuopt check CAND --baseline BASE --gates outside-ops``: its exit code and the gate."""
    got = run_gpuopt(
        "check", str(cand), "--baseline", str(base), "--format", "json", "--gates", "outside-ops"
    )
    gate = json.loads(got.stdout)["gates"][0]
    assert gate["id"] == "outside_ops", gate
    return got.returncode, gate


def test_a_planted_sleep_fails_the_outside_ops_gate_at_its_line(tmp_path: Path) -> None:
    """Two real runs, one run a side: a 20 ms sleep in a step of a few milliseconds fails the
    outside-ops gate naming its line, whatever the step-time gate makes of the machine's drift;
    the baseline against itself passes it."""
    runs = {
        name: _profiled(
            tmp_path / f"{name}.py", SLEEPY.replace("SLEEP", stmt), tmp_path / f"run-{name}"
        )
        for name, stmt in (("base", "pass"), ("slept", "time.sleep(0.02)"))
    }
    # a loaded machine (a neighbour's suite) makes it inconclusive, never a failure
    _, same = _outside_gate(runs["base"], runs["base"])
    assert same["verdict"] in ("pass", "inconclusive"), same
    code, gate = _outside_gate(runs["slept"], runs["base"])
    if gate["verdict"] == "inconclusive":  # a side ran on a busy machine
        assert "busy machine" in gate["detail"], gate
        return
    assert code == 1 and gate["verdict"] == "fail", gate
    assert "slept.py:13" in gate["detail"], gate  # the sleep's line


def test_a_sleep_in_a_step_of_tiny_ops_is_seen_where_the_cap_took_the_time(tmp_path: Path) -> None:
    """index_loops: the recorder makes its window steps 12-25x slower and their time is capped at
    the unrecorded steps', which leaves nothing between ops: a planted 3 ms sleep (25% of the
    step) was 0 outside ops and the gate passed it (bench_check). The sampler's own time at the
    sleep's line is recorder-free: the gate reads it."""
    from conftest import ROOT

    source = (ROOT / "examples" / "index_loops.py").read_text()
    anchor = "        opt.step()\n"
    assert source.count(anchor) == 1
    runs = {
        name: _profiled(
            tmp_path / name / "index_loops.py",
            source.replace(anchor, anchor.rstrip("\n") + stmt + "\n"),
            tmp_path / f"run-{name}",
        )
        for name, stmt in (("base", ""), ("slept", "; __import__('time').sleep(0.004)"))
    }
    doc = json.loads((runs["slept"] / "profile.json").read_text())["dispatch"]
    assert doc["outside_ops_named_us_per_step"] > 2000, doc["outside_ops_named_us_per_step"]
    _, gate = _outside_gate(runs["slept"], runs["base"])
    if gate["verdict"] == "inconclusive":  # a side ran on a busy machine
        assert "busy machine" in gate["detail"], gate
        return
    steps = doc.get("outside_ops_named_us_steps")
    assert gate["verdict"] == "fail" and "index_loops.py:" in gate["detail"], (gate, steps, doc)
