"""benchmarks/bench_stability.py's counting: a run's status per finding id, flips from the
majority, and which runs its drift of the median step takes as quiet (the benchmark itself runs
for many minutes: docs/benchmarks.md)."""

from __future__ import annotations

import math
import statistics

from conftest import load_benchmark

bench = load_benchmark("bench_stability")


def _f(fid: str, severity: str, borderline: bool = False, value: float = 0.3) -> dict:
    iv = {"value": value, "low": value - 0.05, "high": value + 0.05}
    return {"id": fid, "site": "x.py:1", "severity": severity, "borderline": borderline,
            "interval": iv}  # fmt: skip


def _run(
    *findings: dict, median: float = 0.01, delay: float | None = 0.0, other: float = 0.0
) -> dict:
    return {
        "findings": list(findings),
        "median_s": median,
        "run_delay": delay,
        "other_cores": other,
        "load1": 1.0,
    }


def test_status_is_the_highest_firm_severity_then_borderline_then_absent() -> None:
    assert bench.status([], "launch-bound") == "absent"
    assert bench.status([_f("launch-bound", "medium", True)], "launch-bound") == "borderline"
    both = [_f("launch-bound", "medium", True), _f("launch-bound", "low")]
    assert bench.status(both, "launch-bound") == "low"
    assert bench.status([_f("a", "low"), _f("a", "high")], "a") == "high"


def test_a_high_flip_is_a_run_high_where_the_majority_is_not() -> None:
    runs = [_run(_f("launch-bound", "medium", True, 0.24)) for _ in range(4)]
    runs.append(_run(_f("launch-bound", "high", False, 0.31)))
    runs.append(_run())
    (row,) = bench.flips(runs)
    assert row["majority"] == "borderline"
    assert row["flips"] == 2  # the HIGH run and the absent one
    assert row["high_flips"] == 1
    assert row["statuses"] == {"borderline": 4, "high": 1, "absent": 1}
    assert row["evidence_sd"] is not None and row["evidence_sd"] > 0


def test_quiet_runs_are_those_gpuopt_check_would_not_call_disturbed() -> None:
    assert bench.quiet_run(_run(delay=0.02, other=1.5))  # others busy, but it did not wait
    assert bench.quiet_run(_run(delay=0.30, other=0.1))  # waited on its own threads
    assert not bench.quiet_run(_run(delay=0.06, other=0.3))
    assert bench.quiet_run(_run(delay=None, other=0.4))  # without the wait: others' cores
    assert not bench.quiet_run(_run(delay=None, other=0.6))


def test_drift_of_the_median_step_over_all_and_over_quiet_runs() -> None:
    rows = [_run(median=m) for m in (0.010, 0.011, 0.0105)]
    rows.append(_run(median=0.030, delay=0.5, other=1.0))  # a neighbour tripled it
    d = bench.drift(rows)
    assert d["quiet_runs"] == 3
    quiet = [math.log(m) for m in (0.010, 0.011, 0.0105)]
    assert math.isclose(d["sd_log_quiet"], statistics.stdev(quiet))
    assert d["sd_log"] > 5 * d["sd_log_quiet"]
    assert d["max_s"] == 0.030
