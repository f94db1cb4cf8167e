"""The window: only its steps are recorded; outside it nothing is installed; the run's end,
failures and the user's own modes are handled without breaking the user's code."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from probes_support import ROOT, context, host_document, load, record, site
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from gpuopt.probes.recorder import DispatchRecorder

NAME = "planted_window.py"


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def _no_modes() -> bool:
    return not _get_current_function_mode_stack() and not _get_current_dispatch_mode_stack()


def _ops_per_step(doc: dict) -> float:
    """Ops per step, all of them at the planted line."""
    d = doc["dispatch"]
    assert [s["site"] for s in d["top_sites"]] == [site(NAME, "WINDOW-ADD")]
    return d["ops_per_step"]


def test_only_window_steps_are_recorded(tmp_path: Path) -> None:
    mod = load(NAME)
    # step i does i + 1 reads; window = steps 2 and 3 -> (3 + 4) / 2 per step
    doc = record(mod["train_step"], steps=7, tmp_path=tmp_path, window_start=2, window_steps=2)
    assert _ops_per_step(doc) == 3.5
    assert (doc["dispatch"]["window_start"], doc["dispatch"]["window_steps"]) == (2, 2)
    assert _no_modes()


def test_window_at_start(tmp_path: Path) -> None:
    mod = load(NAME)
    doc = record(mod["train_step"], steps=4, tmp_path=tmp_path, window_start=0, window_steps=3)
    assert _ops_per_step(doc) == 2  # (1 + 2 + 3) / 3
    assert doc["dispatch"]["window_start"] == 0


def test_nothing_installed_outside_the_window(tmp_path: Path) -> None:
    mod = load(NAME)
    probe = DispatchRecorder()
    probe.start(context(tmp_path, window_start=3, window_steps=1))
    assert _no_modes()
    mod["train_step"](0)
    probe.on_step(0, time.perf_counter())
    assert _no_modes()
    probe.on_step(1, time.perf_counter())  # the last warm-up step (2) is recorded, in case
    assert _get_current_function_mode_stack() and _get_current_dispatch_mode_stack()
    probe.on_step(2, time.perf_counter())  # the window opens when step 2 ends
    assert _get_current_function_mode_stack() and _get_current_dispatch_mode_stack()
    mod["train_step"](3)
    probe.on_step(3, time.perf_counter())
    assert _no_modes()
    mod["train_step"](4)  # after the window: not recorded
    probe.stop()
    doc = host_document(probe)
    assert _ops_per_step(doc) == 4


def test_window_zero_turns_everything_off(tmp_path: Path) -> None:
    mod = load(NAME)
    probe = DispatchRecorder()
    probe.start(context(tmp_path, window_start=0, window_steps=0))
    assert _no_modes()
    mod["train_step"](1)
    probe.on_step(0, time.perf_counter())
    probe.stop()
    doc = host_document(probe)
    assert doc["syncs"] == [] and doc["dispatch"]["window_steps"] == 0
    assert doc["dispatch"]["ops_per_step"] is None


def test_ops_per_step_exact(tmp_path: Path) -> None:
    mod = load(NAME)
    doc = record(mod["ten_adds"], steps=4, tmp_path=tmp_path, window_start=1, window_steps=2)
    d = doc["dispatch"]
    assert d["ops_per_step"] == 10
    assert d["torch_function_calls_per_step"] == 10
    assert d["recorder_overhead_us_per_op"] > 0
    assert 0 <= d["between_ops_share"] <= 1 and 0 <= d["between_ops_step_share"] <= 1
    assert d["step_time_us"] <= d["step_time_us_raw"]  # the recorder's measured cost is removed
    first = int(site(NAME, "TEN-ADDS").rsplit(":", 1)[1])
    assert {s["site"]: s["ops_per_step"] for s in d["top_sites"]} == {
        site(NAME, "TEN-ADDS"): 5,
        f"tests/data/probes/{NAME}:{first + 1}": 5,
    }
    assert sum(s["ops_per_step"] for s in d["top_sites"]) == 10


def test_run_ending_inside_the_window_keeps_complete_steps(tmp_path: Path) -> None:
    mod = load(NAME)
    probe = DispatchRecorder()
    probe.start(context(tmp_path, window_start=1, window_steps=4))
    for i in range(3):  # steps 1 and 2 complete inside the window
        mod["train_step"](i)
        probe.on_step(i, time.perf_counter())
    mod["train_step"](3)  # step 3 never ends: discarded
    probe.stop()
    assert _no_modes()
    doc = host_document(probe)
    assert _ops_per_step(doc) == 2.5  # (2 + 3) / 2
    assert doc["dispatch"]["window_steps"] == 2 and doc["dispatch"]["window_partial"] is False


def test_run_without_steps_reports_nothing_per_step(tmp_path: Path) -> None:
    """A window that never saw a complete step (code after the last step boundary, a run with
    no boundary at all) is no training step: nothing is reported per step, and the note says
    why."""
    mod = load(NAME)
    probe = DispatchRecorder()
    probe.start(context(tmp_path, window_start=0, window_steps=3))
    mod["train_step"](2)  # no step ever ends (no optimizer, no gpuopt.step())
    probe.stop()
    assert _no_modes()
    doc = host_document(probe)
    assert doc["dispatch"]["ops_per_step"] is None and doc["dispatch"]["window_steps"] == 0
    assert "too few steps to record a step" in doc["dispatch"]["note"]
    assert "not a training step" in doc["dispatch"]["note"]


def test_run_ending_before_the_window(tmp_path: Path) -> None:
    mod = load(NAME)
    doc = record(mod["train_step"], steps=2, tmp_path=tmp_path, window_start=5, window_steps=3)
    assert doc["dispatch"]["ops_per_step"] is None
    assert "before the recording window" in doc["dispatch"]["note"]


def test_user_exception_inside_the_window(tmp_path: Path) -> None:
    probe = DispatchRecorder()
    probe.start(context(tmp_path, window_start=0, window_steps=3))
    with pytest.raises(ValueError):
        torch.ones(2).sum().item()
        raise ValueError("user code failed")
    probe.stop()  # must not raise
    assert _no_modes()
    host_document(probe)


def test_user_mode_pushed_inside_the_window_stays_and_ours_leaves_from_under_it(
    tmp_path: Path,
) -> None:
    """The window ends while a mode pushed later is on top: that one stays where it is (its
    owner's ``__exit__`` pops it), the recorder's function mode leaves from below it rather than
    staying inert (a Python call per torch call for the rest of the run)."""

    class UserMode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return func(*args, **(kwargs or {}))

    mod = load(NAME)
    probe = DispatchRecorder()
    probe.start(context(tmp_path, window_start=0, window_steps=1))
    user = UserMode()
    user.__enter__()  # the user's mode, above the recorder's
    mod["ten_adds"](0)
    probe.on_step(0, time.perf_counter())  # window ends while the user's mode is on top
    assert _get_current_function_mode_stack() == [user]
    mod["ten_adds"](1)  # recorder off: not counted
    user.__exit__(None, None, None)
    assert _no_modes()
    probe.stop()
    assert _no_modes()
    doc = host_document(probe)
    assert doc["dispatch"]["ops_per_step"] == 10
    assert not any("another torch mode" in w for w in doc["warnings"])


def test_step_time_from_the_recorded_steps_themselves(tmp_path: Path) -> None:
    """Step time and data wait come from the window's own steps (the DataLoader probe's wait
    for those steps), never from the unrecorded ones: the split adds up over the same steps."""
    mod = load(NAME)
    series = [{"index": i, "time_s": 1.0, "data_wait_s": 0.0, "warmup": i < 1} for i in range(8)]
    series[1]["data_wait_s"] = series[2]["data_wait_s"] = 0.0001  # the window's steps
    series[5]["data_wait_s"] = 0.5  # an unrecorded step: ignored
    doc = record(
        mod["ten_adds"],
        steps=8,
        tmp_path=tmp_path,
        window_start=1,
        window_steps=2,
        series=series,
    )
    d = doc["dispatch"]
    assert d["step_time_source"].startswith("the window's steps, recorder cost subtracted")
    assert d["step_time_capped_steps"] == 0  # the unrecorded steps (1 s) are slower
    assert d["step_time_us"] < d["step_time_us_raw"]  # the recorder's cost is taken out
    # the window's own waits (at most 100 µs, capped by the step's time), never step 5's 0.5 s
    assert 0.0 < d["data_wait_us_per_step"] <= 100.0
    assert d["between_ops_us_per_step"] == pytest.approx(
        d["step_time_us"] - d["data_wait_us_per_step"] - d["op_time_us_per_step"], abs=0.2
    )


def _short_run(mod: dict, tmp_path: Path, steps: int) -> dict:
    """``steps`` steps with the window at step 2 (the default warm-up)."""
    return record(mod["train_step"], steps=steps, tmp_path=tmp_path, window_start=2,
                  window_steps=1)  # fmt: skip


def test_a_run_ending_in_its_warm_up_is_recorded_at_its_last_warm_up_step(
    tmp_path: Path,
) -> None:
    """Two LBFGS steps over the whole data (time_sequence_prediction --steps 2) end before the
    window: the last warm-up step, recorded in case, stands for it."""
    doc = _short_run(load(NAME), tmp_path, steps=2)
    assert _no_modes()
    assert _ops_per_step(doc) == 2  # step 1's two reads
    assert doc["dispatch"]["window_start"] == 1
    assert any("its last warm-up step (step 1), recorded in case" in w for w in doc["warnings"])


def test_the_warm_up_step_recorded_in_case_is_dropped_when_the_window_opens(
    tmp_path: Path,
) -> None:
    doc = _short_run(load(NAME), tmp_path, steps=4)
    assert _ops_per_step(doc) == 3  # step 2, the window's
    assert doc["dispatch"]["window_start"] == 2
    assert not any("warm-up step" in w for w in doc["warnings"])


def test_a_run_ending_inside_the_warm_up_step_records_nothing(tmp_path: Path) -> None:
    doc = _short_run(load(NAME), tmp_path, steps=1)  # step 1 never ends
    assert _no_modes()
    assert doc["dispatch"]["ops_per_step"] is None
    assert "before the recording window" in doc["dispatch"]["note"]
