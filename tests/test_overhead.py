"""The ``overhead`` key: what gpuopt itself cost a run, measured in the run (docs/contract.md),
and the report's line that says it. Checked for presence and consistency, never for a time."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import SCRIPTS, run_gpuopt

from gpuopt.assemble.overhead import overhead_record, with_end
from gpuopt.model.document import empty_profile
from gpuopt.probes.own_cost import Spent

PARTS = ("start_s", "steps_s", "threads_s", "windows_s", "end_s")


def test_the_windows_count_their_steps_beyond_the_median_and_the_hooks_outside() -> None:
    # steps 2-4 recorded (10 ms each against 2 ms), gpuopt's listeners 1 ms at step 4's end;
    # the 3 ms that turned the window on at step 1's end are in step 2's 10 ms, counted there
    times = [0.05, 0.002, 0.010, 0.010, 0.010, 0.0021, 0.002, 0.002]
    costs = [1e-5, 3e-3, 2e-3, 2e-3, 1e-3, 1e-5, 1e-5, 1e-5]
    o = overhead_record(Spent(0.1, costs, 0.02), times, {2, 3, 4}, usual=0.002)
    assert o.steps == 5 and o.window_steps == 3
    assert o.steps_s == pytest.approx(4e-5)
    assert o.per_step_s == pytest.approx(8e-6)
    # 3 x 8 ms beyond the median, and the 1 ms at the window's last boundary
    assert o.windows_s == pytest.approx(0.024 + 0.001)
    p = empty_profile("train.py", [])
    p.overhead, p.wall_s = o, 1.0
    with_end(p, 0.2)
    total = 0.1 + 4e-5 + 0.02 + 0.025 + 0.2
    assert o.end_s == 0.2 and o.total_s == pytest.approx(total)
    assert o.share == pytest.approx(total / 1.3, abs=1e-6)


def test_a_warm_up_step_recorded_in_case_counts_as_a_window_step() -> None:
    # step 1 recorded in case the window (steps 2-4) never comes: 9 ms against 2 ms; the
    # statistics keep it (not instrumented), the overhead counts it with the windows
    times = [0.05, 0.009, 0.010, 0.010, 0.010, 0.002, 0.002, 0.002]
    costs = [3e-3, 2e-3, 2e-3, 2e-3, 1e-3, 1e-5, 1e-5, 1e-5]
    plain = overhead_record(Spent(0.1, costs, 0.02), times, {2, 3, 4}, usual=0.002)
    o = overhead_record(Spent(0.1, costs, 0.02, recorded=[1]), times, {2, 3, 4}, usual=0.002)
    assert (plain.window_steps, o.window_steps) == (3, 4)
    assert o.windows_s == pytest.approx(plain.windows_s + 0.007)
    # step 0's listeners turned the recorder on: in step 1's 9 ms, counted there, not twice
    assert o.steps == 4 and o.steps_s == pytest.approx(3e-5)


def test_no_usual_step_means_no_window_cost() -> None:
    o = overhead_record(Spent(0.0, [1e-5], 0.0), [0.01], {0}, usual=None)
    assert o.windows_s == 0.0 and o.steps == 0 and o.per_step_s == 0.0


@pytest.mark.slow
def test_a_run_says_what_gpuopt_cost_it(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = run_gpuopt("profile", "-o", str(out), str(SCRIPTS / "tiny_batch.py"))
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "profile.json").read_text())
    o = doc["overhead"]
    for key in (*PARTS, "total_s", "share", "per_step_s"):
        assert isinstance(o[key], float) and math.isfinite(o[key]) and o[key] >= 0, key
    assert o["total_s"] == pytest.approx(sum(o[k] for k in PARTS), abs=1e-5)
    assert 0 < o["share"] < 1
    assert o["total_s"] < doc["wall_s"] + o["start_s"] + o["end_s"]
    assert o["start_s"] > 0 and o["end_s"] > 0  # gpuopt's start and end always take some time
    steps = doc["steps"]
    # the windows' steps and step 1, the recorder's last warm-up step, recorded in case
    assert o["window_steps"] == len([i for i in steps["instrumented"] if i > 0]) + 1
    assert o["steps"] + len(steps["instrumented"]) + 1 == steps["count"]
    assert o["per_step_s"] * o["steps"] == pytest.approx(o["steps_s"], abs=1e-6)
    assert o["windows_s"] > 0  # the recorder's steps are slower than the others
    text = " ".join(r.stdout.split())  # the line may wrap
    assert "gpuopt's own cost this run" in text[-400:]  # the report's last line
    for fmt, where in (("md", "<sub>gpuopt's own cost"), ("html", "<footer>gpuopt&#x27;s own")):
        shown = run_gpuopt("report", str(out), "--format", fmt)
        assert shown.returncode == 0 and where in shown.stdout, fmt


def test_the_end_imports_the_report_it_will_print_before_it_is_timed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    from gpuopt.runner.finish import import_report
    from gpuopt.runner.options import ProfileOptions

    for fmt, module in (("text", "gpuopt.report.text"), ("md", "gpuopt.report.markdown")):
        monkeypatch.delitem(sys.modules, module, raising=False)
        import_report(ProfileOptions(script="t.py", module=None, args=[], fmt=fmt, quiet=True))
        assert module not in sys.modules, fmt  # --quiet prints no report: nothing to import
        import_report(ProfileOptions(script="t.py", module=None, args=[], fmt=fmt))
        assert module in sys.modules, fmt
    import_report(ProfileOptions(script="t.py", module=None, args=[], fmt="nope"))  # no raise
