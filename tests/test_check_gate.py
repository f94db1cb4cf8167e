"""gpuopt check (issue 16, first part): the gates over two Profiles, and the command's exit
codes. Synthetic runs with known per-step times: no test depends on this machine's speed."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from conftest import run_gpuopt

from gpuopt.errors import GpuoptError
from gpuopt.gate.check import Thresholds, evaluate, exit_code, parse_fraction
from gpuopt.model.document import empty_profile, encode
from gpuopt.model.profile import Finding, Profile, StepRecord, Sync


def _run(times: list[float], waits: list[float] | None = None, syncs: float = 1.0) -> Profile:
    p = empty_profile("train.py")
    p.steps.series = [
        StepRecord(
            index=i,
            start_s=None,
            time_s=t,
            warmup=i < 2,
            data_wait_s=(waits[i] if waits else 0.0),
        )
        for i, t in enumerate(times)
    ]
    p.steps.count = len(times)
    p.dispatch.ops_per_step = 100
    p.syncs = [Sync(kind="item", site="train.py:9", count_per_step=syncs)]
    return p


def _noisy(median: float, n: int = 40, spread: float = 0.03, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [median * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def _gate(gates, name):  # type: ignore[no-untyped-def]
    return next(g for g in gates if g.metric == name)


def test_identical_distributions_pass_and_a_planted_10_percent_fails() -> None:
    base = _run(_noisy(0.100, seed=1))
    same = _run(_noisy(0.100, seed=2))
    slower = _run(_noisy(0.110, seed=3))
    th = Thresholds()
    assert _gate(evaluate(base, same, th), "step time (median)").verdict == "pass"
    gate = _gate(evaluate(base, slower, th), "step time (median)")
    assert gate.verdict == "fail" and "interval" in gate.detail
    assert exit_code(evaluate(base, slower, th), strict=False) == 1


def test_a_slowdown_inside_the_noise_does_not_fail() -> None:
    """6% slower medians, but per-step times spread ±30%: the interval reaches below +5%."""
    base = _run(_noisy(0.100, n=12, spread=0.3, seed=4))
    cand = _run(_noisy(0.106, n=12, spread=0.3, seed=5))
    assert _gate(evaluate(base, cand, Thresholds()), "step time (median)").verdict == "pass"


def test_too_few_steps_is_inconclusive_and_strict_fails_it() -> None:
    base, cand = _run([0.1] * 5), _run([0.2] * 5)
    gates = evaluate(base, cand, Thresholds())
    assert _gate(gates, "step time (median)").verdict == "inconclusive"
    assert exit_code(gates, strict=False) == 0 and exit_code(gates, strict=True) == 1


def test_data_wait_share_in_points() -> None:
    times = [0.1] * 30
    base = _run(times, [0.02] * 30)
    cand = _run(times, [0.06] * 30)  # 20% -> 60% of the step
    gate = _gate(evaluate(base, cand, Thresholds()), "data wait (share of step)")
    assert gate.verdict == "fail" and gate.change == "+40.0pt"


def test_exact_counters_fail_on_any_increase() -> None:
    base, cand = _run([0.1] * 20, syncs=1.0), _run([0.1] * 20, syncs=2.0)
    gate = _gate(evaluate(base, cand, Thresholds()), "syncs per step")
    assert (gate.verdict, gate.baseline, gate.candidate) == ("fail", "1", "2")


def test_new_high_findings_fail_unless_allowed() -> None:
    base, cand = _run([0.1] * 20), _run([0.1] * 20)
    cand.findings = [
        Finding(id="dataloader-bound", severity="high", title="t", evidence={}, fix="", site="a:1")
    ]
    (gate,) = [g for g in evaluate(base, cand, Thresholds()) if g.metric.startswith("new HIGH")]
    assert gate.verdict == "fail" and gate.site == "a:1"
    allowed = Thresholds(allow=frozenset({"dataloader-bound"}))
    assert exit_code(evaluate(base, cand, allowed), strict=False) == 0


@pytest.mark.parametrize(("text", "unit", "value"), [("5%", "%", 0.05), ("3pt", "pt", 0.03)])
def test_thresholds_parse(text: str, unit: str, value: float) -> None:
    assert parse_fraction(text, unit) == pytest.approx(value)
    with pytest.raises(GpuoptError, match="expected a number of"):
        parse_fraction("five", unit)


def test_the_command_exits_0_1_2(tmp_path: Path) -> None:
    base, slower = tmp_path / "base.json", tmp_path / "slow.json"
    base.write_bytes(encode(_run(_noisy(0.100, seed=1))))
    slower.write_bytes(encode(_run(_noisy(0.120, seed=2))))
    ok = run_gpuopt("check", str(base), "--baseline", str(base), "--format", "json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["exit_code"] == 0
    bad = run_gpuopt("check", str(slower), "--baseline", str(base))
    assert bad.returncode == 1 and "REGRESSION: step time (median)" in bad.stdout
    missing = run_gpuopt("check", str(tmp_path / "nope"), "--baseline", str(base))
    assert missing.returncode == 2 and missing.stderr.startswith("gpuopt: error:")
    assert "Traceback" not in missing.stderr
    odd = run_gpuopt("check", str(base), "--baseline", str(base), "--max-step-time-regression", "x")
    assert odd.returncode == 2 and "expected a number of %" in odd.stderr
