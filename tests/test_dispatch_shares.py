"""Dispatch shares come from the recorded steps only: a run whose step time drifts
after the window (a neighbour's load rising) must not turn the difference into dispatch
overhead, and a dispatch finding with an implausible host time per op does not fire."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from gpuopt.assemble.host_summary import summarize
from gpuopt.findings.engine import evaluate
from gpuopt.findings.rules.host_dispatch import MIN_IMPLAUSIBLE_US, plausible_per_op_us
from gpuopt.model.profile import Profile, StepRecord
from gpuopt.probes.recorder import RecorderCapture
from gpuopt.probes.recorder_calibration import Calibration
from gpuopt.probes.recorder_counters import StepCounters
from gpuopt.probes.recorder_engine import RecorderEngine
from gpuopt.sites import SiteResolver

FREE = Calibration(
    function_entry_us=0.0,
    dispatch_entry_us=0.0,
    passthrough_us=0.0,
    inflation_us=0.0,
    op_us_without_recorder=1.0,
    op_us_with_recorder=1.0,
)


def _window_step(wall_s: float) -> StepCounters:
    """One recorded step, as a ResNet-like step measures it: 575 ops, 400 of them tiny (5 µs),
    175 of 40 µs: 9 ms of op time."""
    c = StepCounters()
    c.ops = c.dispatch_events = 575
    c.small_ops, c.small_s = 400, 400 * 5e-6
    c.op_s = c.small_s + 175 * 40e-6
    c.wall_s = wall_s
    return c


def _capture(walls: list[float], window_start: int, next_step: int) -> RecorderCapture:
    engine = RecorderEngine(SiteResolver([]), cpu_only=True)
    for w in walls:
        c = _window_step(w)
        engine.step_counters.append(c)
        engine.total.merge(c)
        engine.steps_done += 1
    return RecorderCapture(
        enabled=True,
        off=False,
        window_start=window_start,
        snapshot=engine.snapshot(),
        calibration=FREE,
        next_step=next_step,
        shapes=None,
        unfinished=False,
    )


def _series(times: list[float]) -> list[StepRecord]:
    return [
        StepRecord(index=i, start_s=None, time_s=t, warmup=i < 2, data_wait_s=0.0)
        for i, t in enumerate(times)
    ]


def test_step_time_drifting_after_the_window_is_not_dispatch_overhead() -> None:
    """Recorded steps 2-4 take 9.6 ms (9 ms of it in ops); the machine then slows down and the
    35 unrecorded steps take 30 ms. The old split subtracted the window's op time from the
    unrecorded median (30 - 9 = 21 ms "between ops": 77% host dispatch, a HIGH launch-bound).
    Measured over the same steps, between-op time is 0.6 ms."""
    times = [0.05, 0.02, 0.0096, 0.0096, 0.0096] + [0.030] * 35  # the step clock's readings
    host = summarize(_capture([0.0096] * 3, window_start=2, next_step=40), _series(times))
    d = host.dispatch
    assert d.step_time_us == pytest.approx(9600.0)
    assert d.op_time_us_per_step == pytest.approx(9000.0)
    assert d.between_ops_us_per_step == pytest.approx(600.0)
    assert d.host_dispatch_share == pytest.approx((600 + 2000) / 9600, abs=1e-4)
    profile = Profile(dispatch=d, findings=[])
    assert [f.id for f in evaluate(profile, only={"launch-bound"})] == []


def test_a_real_host_overhead_is_still_reported() -> None:
    """Recorded steps of 30 ms (21 ms between ops), their unrecorded neighbours as slow: the
    overhead is reported, however fast the run became much later."""
    times = [0.05, 0.02] + [0.03] * 3 + [0.03] * 5 + [0.010] * 30
    host = summarize(_capture([0.030] * 3, window_start=2, next_step=40), _series(times))
    assert host.dispatch.between_ops_us_per_step == pytest.approx(21000.0)
    assert host.dispatch.step_time_capped_steps == 0
    (f,) = evaluate(Profile(dispatch=host.dispatch, findings=[]), only={"launch-bound"})
    assert f.evidence["host_us_per_op"] == pytest.approx(0.7667 * 30000 / 575, abs=0.1)


def test_recorder_cost_the_model_misses_is_capped_by_the_neighbours() -> None:
    """The recorder slows its steps by more than its per-call model accounts for: a recorded
    step can never have been slower, recorder-free, than its unrecorded neighbours (10 ms)."""
    times = [0.05, 0.02] + [0.03] * 3 + [0.010] * 35
    host = summarize(_capture([0.030] * 3, window_start=2, next_step=40), _series(times))
    d = host.dispatch
    assert d.step_time_us == pytest.approx(10000.0)
    assert d.between_ops_us_per_step == pytest.approx(1000.0)
    assert d.step_time_capped_steps == 3
    assert str(d.step_time_source).endswith("at most the unrecorded steps nearest the window")


def test_a_cost_model_that_took_the_whole_step_gives_way_to_the_neighbours() -> None:
    """A calibration the machine disturbed: 2 index_loops runs of 46 read 15-18 µs per dispatch
    entry (6 µs in the rest), the model took more than the recorded step, and the step read 0 µs
    (op time and host dispatch 100% of nothing). A recorder-free step is at least the time in its
    ops: the unrecorded neighbours say what it was; without them, its ops' time."""
    import msgspec

    times = [0.05, 0.02] + [0.03] * 3 + [0.010] * 35
    greedy = msgspec.structs.replace(FREE, dispatch_entry_us=60.0)  # 575 x 60 µs: 34.5 ms of 30
    d = summarize(_capture([0.030] * 3, window_start=2, next_step=40), _series(times)).dispatch
    bad = summarize(
        msgspec.structs.replace(
            _capture([0.030] * 3, window_start=2, next_step=40), calibration=greedy
        ),
        _series(times),
    ).dispatch
    assert bad.step_time_us == pytest.approx(10000.0) == d.step_time_us
    assert bad.step_time_capped_steps == 3
    assert bad.op_time_us_per_step == pytest.approx(9000.0)
    alone = summarize(
        msgspec.structs.replace(
            _capture([0.030] * 3, window_start=2, next_step=5), calibration=greedy
        ),
        _series([0.05, 0.02] + [0.03] * 3),  # no unrecorded step to bound it
    ).dispatch
    assert alone.step_time_us == pytest.approx(9000.0)  # its ops' time, not 0
    assert alone.step_time_capped_steps == 0


def _dispatch(step_time_us: float, calibrated: float | None = 1.5) -> dict[str, Any]:
    d: dict[str, Any] = {
        "ops_per_step": 575,
        "tiny_ops_per_step": 400,
        "host_dispatch_share": 0.49,
        "step_time_us": step_time_us,
        "mean_op_us": 6.0,
        "between_ops_us_per_step": 0.4 * step_time_us,
    }
    if calibrated is not None:
        d["calibrated_op_us"] = calibrated
    return d


def test_launch_bound_with_implausible_host_time_per_op_does_not_fire() -> None:
    """A reported case: 575 small ops "taking 49% of the step" at 2.4 ms per op, 1,600
    times a trivial op call: not dispatch overhead."""
    implausible = msgspec.convert({"dispatch": _dispatch(2.8e6)}, Profile)
    assert evaluate(implausible, only={"launch-bound"}) == []
    plausible = msgspec.convert({"dispatch": _dispatch(10_000.0)}, Profile)  # 8.5 µs per op
    (f,) = evaluate(plausible, only={"launch-bound"})
    assert f.evidence["host_us_per_op"] == pytest.approx(0.49 * 10_000 / 575, abs=0.01)


def test_plausible_per_op_bound() -> None:
    slow = msgspec.convert({"dispatch": _dispatch(1.0, calibrated=4.0)}, Profile)
    assert plausible_per_op_us(slow) == 200.0  # 50 x the calibrated trivial op
    old = msgspec.convert({"dispatch": _dispatch(1.0, calibrated=None)}, Profile)
    assert plausible_per_op_us(old) == MIN_IMPLAUSIBLE_US  # documents before the calibration


def test_a_capped_step_still_adds_up_with_its_neighbours_wait() -> None:
    """slow_dataset's shape: the neighbours take 10 ms, 9.5 ms of it waiting on the DataLoader;
    the recorded steps (30 ms, 9 ms in ops) are capped there. The rows of the split must add up
    to the step (before: 9.5 ms wait + 9 ms ops in a 10 ms step, between ops clamped to 0)."""
    times = [0.05, 0.02] + [0.03] * 3 + [0.010] * 35
    series = [
        StepRecord(index=i, start_s=None, time_s=t, warmup=i < 2, data_wait_s=0.0095)
        for i, t in enumerate(times)
    ]
    d = summarize(_capture([0.030] * 3, window_start=2, next_step=40), series).dispatch
    assert d.step_time_us == pytest.approx(10000.0)
    assert d.data_wait_us_per_step == pytest.approx(9500.0)
    assert d.op_time_us_per_step == pytest.approx(500.0)
    assert d.between_ops_us_per_step == pytest.approx(0.0)


def test_lines_times_add_up_to_at_most_the_step_they_share() -> None:
    """Where the recorder cost more than its per-call model says, the missed cost stayed in the
    lines' times while the step was capped at its unrecorded neighbours: a line's share of a
    capped step could not be told from the recorder's cost. The lines are scaled into the step's
    host time; a step whose lines fit is left as it is."""
    from gpuopt.assemble.host_summary import _site_scale
    from gpuopt.probes.recorder_snapshot import SiteCounts, StepSnapshot

    sites = {
        (i, 0): SiteCounts(ops=50, time_s=secs) for i, secs in enumerate((0.004, 0.002, 0.001))
    }
    sites[(9, 0)] = SiteCounts(ops=50, time_s=0.5, data=True)  # data loading: never a line's
    c = StepSnapshot(sites=sites, dispatch_events=200)
    assert _site_scale(c, FREE, 0.0035) == pytest.approx(0.5)
    assert _site_scale(c, FREE, 0.010) == 1.0


def test_a_per_sample_loop_reads_its_share_of_the_step_not_the_recorders(tmp_path: Path) -> None:
    """examples/ragged_steps.py, whose per-sample loop takes 48% of the step timed by a clock in
    the script (2 ms of 5 ms: its forward passes; the backward and the optimizer the rest): its
    lines summed to 1.3-1.9 steps and the loop read 72-100% while the recorder cost 3-6 steps
    a window step. Now the lines add up to at most the step."""
    from conftest import run_gpuopt

    run = run_gpuopt(
        "profile", "-o", str(tmp_path / "run"), "--quiet", "examples/ragged_steps.py",
        "--epochs", "1",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    doc = msgspec.json.decode((tmp_path / "run" / "profile.json").read_bytes())
    tops = doc["dispatch"]["top_sites"]
    assert tops and sum(t["time_share"] for t in tops) <= 1.0 + 1e-3
    (loop,) = [x for x in doc["loops"] if x["site"].endswith("ragged_steps.py:52")]
    assert loop["time_share"] < 0.9
