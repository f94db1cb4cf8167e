"""Which fixes stay, decided from their own runs: a run that crashes, changes the training or is
measurably slower drops its fix (with the reason), candidate 1 runs again without it, and the
user's files and the baseline are untouched. The runs are faked: this is the decision logic."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuopt.model.optimize import OptimizeDocument, RunResult
from gpuopt.model.profile import Profile
from gpuopt.model.records import TrainingRecord
from gpuopt.optimize import command
from gpuopt.optimize.catalogue import BY_NAME
from gpuopt.optimize.command import OptimizeOptions, _ablation, _candidates, _State
from gpuopt.optimize.plan import PlannedFix
from gpuopt.optimize.progress import Phases
from gpuopt.optimize.runs import Done, Launch, RunSpec

LOSSES = [2.0, 1.5, 1.2]


def _done(
    spec: RunSpec, *, crash: bool = False, losses: list[float] | None = None, step_s: float = 0.1
) -> Done:
    result = RunResult(label=spec.label, role=spec.role, dir=str(spec.dir), fixes=spec.fixes)
    result.step_s = [step_s] * 10
    if crash:
        result.status, result.exit_code = "error", 1
        return Done(result, None, "", "RuntimeError: boom", spec.dir)
    profile = Profile(training=TrainingRecord(losses=losses or LOSSES, param_digest="d"))
    return Done(result, profile, "same output\n", "", spec.dir)


@pytest.fixture
def state(tmp_path: Path) -> _State:
    opts = OptimizeOptions(script="train.py", module=None, args=[], out=tmp_path)
    st = _State(
        opts,
        tmp_path,
        Launch("train.py", None, [], 10, 2, 0),
        Phases(quiet=True),
        OptimizeDocument(),
    )
    baseline = RunSpec("baseline 1", "baseline", tmp_path / "runs" / "baseline-1")
    st.runs.append(_done(baseline))
    return st


def _fix(name: str) -> PlannedFix:
    return PlannedFix(BY_NAME[name], True, True, "planned")


def test_a_fix_whose_own_run_crashes_is_dropped_before_the_candidate(
    state: _State, monkeypatch: pytest.MonkeyPatch
) -> None:
    labels: list[str] = []

    def fake(launch: Launch, spec: RunSpec) -> Done:
        labels.append(spec.label)
        return _done(spec, crash=spec.label == "only zero-grad")

    monkeypatch.setattr(command, "run_once", fake)
    syncs, zero = _fix("syncs"), _fix("zero-grad")
    kept = _candidates(state, _ablation(state, [syncs, zero]))
    assert kept == [syncs]
    assert "the run with only this fix failed: RuntimeError: boom" in zero.reason
    assert not zero.selected and any("zero-grad: dropped" in w for w in state.doc.warnings)
    assert labels == ["only syncs", "only zero-grad", "candidate 1", "baseline 2", "candidate 2"]


def test_a_change_seen_once_the_floor_is_known_reruns_candidate_1(
    state: _State, monkeypatch: pytest.MonkeyPatch
) -> None:
    labels: list[str] = []

    def fake(launch: Launch, spec: RunSpec) -> Done:
        labels.append(spec.label)
        changed = "zero-grad" in spec.fixes
        return _done(spec, losses=[2.0, 1.5, 1.3] if changed else None)

    monkeypatch.setattr(command, "run_once", fake)
    syncs, zero = _fix("syncs"), _fix("zero-grad")
    kept = _candidates(state, _ablation(state, [syncs, zero]))
    assert kept == [syncs] and "training changed with this fix" in zero.reason
    assert labels == [
        "only syncs",
        "only zero-grad",
        "candidate 1",
        "baseline 2",
        "candidate 1b",
        "candidate 2",
    ]
    roles = {r.label: r.role for r in state.doc.runs}
    assert roles["every fix (before dropping)"] == "ablation"  # kept aside, not compared


def test_a_fix_that_changes_the_training_is_dropped(
    state: _State, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake(launch: Launch, spec: RunSpec) -> Done:
        changed = spec.label in ("candidate 1",) or spec.label == "only syncs"
        return _done(spec, losses=[2.0, 1.5, 1.3] if changed else None)

    monkeypatch.setattr(command, "run_once", fake)
    syncs = _fix("syncs")
    assert _candidates(state, [syncs]) == []
    assert "training changed with this fix" in syncs.reason and "from loss 3" in syncs.reason


def test_a_measurably_slower_fix_is_dropped_unless_its_gain_is_gpu_only(
    state: _State, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake(launch: Launch, spec: RunSpec) -> Done:
        return _done(spec, step_s=0.3 if spec.role == "candidate" else 0.1)

    monkeypatch.setattr(command, "run_once", fake)
    zero = _fix("zero-grad")
    assert _candidates(state, [zero]) == []
    assert zero.reason.startswith("slower in the training run (0.33x")
    syncs = _fix("syncs")  # its gain shows on a GPU only: kept on a CPU, with what it measured
    assert _candidates(state, [syncs]) == [syncs]
    assert "on this CPU it measured 0.33x" in syncs.notes[0]
