"""Which fixes stay, decided from their own runs, and how long optimize measures: a run that
crashes, changes the training or is measured slower drops its fix (with the reason), candidate 1
runs again without it; a fix with no measured gain goes unless asked for by name or GPU-only
without a GPU; baseline/candidate pairs are added until each side is tight, the budget or the
runs cap. The runs are faked: this is the decision logic."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from gpuopt.commands import optimize as command
from gpuopt.commands.optimize import OptimizeOptions, _ablation, _candidates, _State
from gpuopt.fixes.catalogue import BY_NAME
from gpuopt.fixes.plan import PlannedFix
from gpuopt.model.optimize import OptimizeDocument, RunResult
from gpuopt.model.profile import Profile
from gpuopt.model.records import TrainingRecord
from gpuopt.optimize.measure.policy import MAX_TIMED_RUNS, Budget
from gpuopt.optimize.output.results import run_gain
from gpuopt.optimize.run.progress import Phases
from gpuopt.optimize.run.runs import Done, Launch, RunSpec, timed

LOSSES = [2.0, 1.5, 1.2]


def _done(
    spec: RunSpec,
    *,
    crash: bool = False,
    losses: list[float] | None = None,
    step_s: float | list[float] = 0.1,
    wall_s: float = 5.0,
) -> Done:
    result = RunResult(label=spec.label, role=spec.role, dir=str(spec.dir), fixes=spec.fixes)
    result.step_s = [step_s] * 10 if isinstance(step_s, float) else list(step_s)
    result.timed, result.wall_s = spec.timed, wall_s
    if crash:
        result.status, result.exit_code = "error", 1
        return Done(result, None, "", "RuntimeError: boom", spec.dir)
    profile = Profile(training=TrainingRecord(losses=losses or LOSSES, param_digest="d"))
    return Done(result, profile, "same output\n", "", spec.dir)


def _state(tmp_path: Path, **opts: object) -> _State:
    options = OptimizeOptions(script="train.py", module=None, args=[], out=tmp_path)
    for k, v in opts.items():
        setattr(options, k, v)
    st = _State(
        options,
        tmp_path,
        Launch("train.py", None, [], 10, 2, 0),
        Phases(quiet=True),
        OptimizeDocument(),
    )
    profile = RunSpec("baseline 1", "baseline", tmp_path / "runs" / "baseline-1", timed=False)
    st.runs.append(_done(profile, step_s=0.5))  # the profile: slowed by the recorder, not timed
    st.runs.append(_done(RunSpec("baseline 2", "baseline", tmp_path / "runs" / "baseline-2")))
    return st


@pytest.fixture
def state(tmp_path: Path) -> _State:
    return _state(tmp_path)


def _fix(name: str) -> PlannedFix:
    return PlannedFix(BY_NAME[name], True, True, "planned")


@pytest.mark.slow  # seconds of CPU: out of make test-fast
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
    # every step alike: each side is tight once it has three runs
    assert labels == [
        "only syncs",
        "only zero-grad",
        "candidate 1",
        "baseline 3",
        "candidate 2",
        "baseline 4",
        "candidate 3",
    ]
    assert state.stopped == "tight"
    assert "no GPU here: its gain is a GPU's" in syncs.notes[-1]  # no gain on a CPU: kept


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
        "baseline 3",
        "candidate 1b",
        "candidate 2",
        "baseline 4",
        "candidate 3",
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


@pytest.mark.parametrize("name", ["zero-grad", "syncs", "pinned-copies"])
def test_a_slower_fix_is_dropped_whatever_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Slower goes, GPU-only or not, named or not: never keep what measured slower."""

    def fake(launch: Launch, spec: RunSpec) -> Done:
        return _done(spec, step_s=0.3 if spec.role == "candidate" else 0.1)

    monkeypatch.setattr(command, "run_once", fake)
    st = _state(tmp_path, fixes=[name])
    fix = _fix(name)
    assert _candidates(st, [fix]) == []
    assert fix.reason.startswith("3.00x slower in the training run (0.33x")


def _noisy(level: float, sd: float, seed: int, n: int = 30) -> list[float]:
    rng = np.random.default_rng(seed)
    return [float(x) for x in level * (1 + sd * rng.standard_normal(n))]


def _seeded_runs(
    state: _State,
    monkeypatch: pytest.MonkeyPatch,
    levels: tuple[float, float],
    steps: Callable[[float, int], list[float]],
) -> list[str]:
    """Fake runs whose steps ``steps(level, seed)`` draws, at ``levels`` (baseline, candidate),
    a new seed a run, baseline 2 included; returns the labels of the runs made from now on."""
    labels: list[str] = []
    seeds = iter(range(100))

    def fake(launch: Launch, spec: RunSpec) -> Done:
        labels.append(spec.label)
        level = levels[0] if spec.role == "baseline" else levels[1]
        return _done(spec, step_s=steps(level, next(seeds)))

    monkeypatch.setattr(command, "run_once", fake)
    state.runs[-1] = fake(state.launch, RunSpec("baseline 2", "baseline", state.dir / "b2"))
    labels.clear()
    return labels


def _scattered(level: float, seed: int, run_sd: float = 0.15, step_sd: float = 0.05) -> list[float]:
    """A run whose level is off by ``run_sd`` (a neighbour's load), its steps by ``step_sd``."""
    rng = np.random.default_rng(seed)
    factor = float(np.exp(run_sd * rng.standard_normal()))
    return [float(x) for x in level * factor * (1 + step_sd * rng.standard_normal(10))]


def test_a_dropped_slower_fix_still_shows_what_it_measured(
    state: _State, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 7.5x AoT case in small, its runs 15% apart: far slower, so measured to three runs a
    side (the candidate's own run-to-run spread in its interval), not further, then dropped —
    and the report's gain is the slowdown that was measured, with why it stopped."""
    from gpuopt.optimize.output.results import fill_results

    labels = _seeded_runs(state, monkeypatch, (0.1, 0.75), _scattered)
    aot = _fix("aot")
    assert _candidates(state, [aot]) == []
    assert labels == ["candidate 1", "baseline 3", "candidate 2", "baseline 4", "candidate 3"]
    assert state.stopped == "far slower"
    fill_results(state.doc, state.runs, [aot], [], apply=False, stopped=state.stopped)
    g = state.doc.gain
    assert g is not None and g.verdict == "slower" and g.runs == [3, 3]
    assert g.stopped == "far slower" and g.speedup is not None
    assert g.low is not None and g.high is not None and g.low < 0.1 / 0.75 < g.high
    assert not (isinstance(g.candidate_half_width, float) and g.candidate_half_width <= 0.05)
    (row,) = state.doc.fixes
    assert not row.applied and row.reason.startswith(f"{1 / g.speedup:.2f}x slower in the")


def test_a_little_slower_fix_is_measured_until_its_size_is_sure(
    state: _State, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fix truly 1.15x slower, its steps ±20% apart: two runs a side already call it slower,
    and once stopped there, with a size as wide as two runs make it (the syncs fix on a CPU:
    "1.26x slower [0.67-0.95]" where the same change timed outside was 1.05x slower). Now pairs
    are added until each side is within ±5% (or the cap, or the budget), and the size printed
    is the one the interval is built around."""
    labels = _seeded_runs(state, monkeypatch, (0.010, 0.0115), lambda x, i: _noisy(x, 0.2, i))
    syncs = _fix("syncs")
    _candidates(state, [syncs])
    cands = [x for x in labels if x.startswith("candidate")]
    assert len(cands) >= 3 and state.stopped == "tight"
    g = run_gain(timed(state.runs, "baseline"), timed(state.runs, "candidate"), [syncs], 0)
    assert g.low is not None and g.high is not None and g.low <= 1 / 1.15 <= g.high
    assert g.high / g.low < 1.2  # two runs a side gave [0.67-0.95]: 1.42 wide


def test_no_measured_gain_goes_unless_named_or_gpu_only_without_a_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(command, "run_once", lambda launch, spec: _done(spec))
    zero = _fix("zero-grad")
    assert _candidates(_state(tmp_path / "a"), [zero]) == []
    assert zero.reason.startswith("no measurable gain (1.00x")
    assert "--fix zero-grad" in zero.reason
    named = _fix("zero-grad")
    assert _candidates(_state(tmp_path / "b", fixes=["zero-grad"]), [named]) == [named]
    assert named.notes[-1].startswith("kept as asked (--fix zero-grad): no measurable gain")
    pinned = _fix("pinned-copies")  # GPU-only, and no GPU here
    assert _candidates(_state(tmp_path / "c"), [pinned]) == [pinned]


def test_pairs_are_added_until_each_side_is_tight(
    state: _State, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps ±20% apart: the fewest runs leave the sides wide; pairs are added until each side's
    interval is within ±5% — the gain is then measured, and says why it stopped."""
    labels = _seeded_runs(state, monkeypatch, (0.010, 0.007), lambda x, i: _noisy(x, 0.2, i))
    vec = _fix("vectorize")
    assert _candidates(state, [vec]) == [vec]
    assert state.stopped == "tight" and len(labels) > 4
    k = (len(labels) + 1) // 2  # candidates; the baselines alternate with them
    assert labels[0::2] == [f"candidate {i}" for i in range(1, k + 1)]
    assert labels[1::2] == [f"baseline {i}" for i in range(3, k + 2)]
    assert state.doc.fixes == []  # (results are filled by _finish)


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_the_runs_cap_and_the_time_budget_stop_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seeds = iter(range(1000))

    def fake(launch: Launch, spec: RunSpec) -> Done:  # ±300% a step: never tight
        return _done(spec, step_s=[abs(x) for x in _noisy(0.01, 3.0, next(seeds))])

    monkeypatch.setattr(command, "run_once", fake)
    st = _state(tmp_path / "cap", fixes=["vectorize"])
    _candidates(st, [_fix("vectorize")])
    assert st.stopped == "runs cap"
    assert sum(1 for d in st.runs if d.result.role == "candidate") == MAX_TIMED_RUNS
    now = [0.0]
    st = _state(tmp_path / "budget", fixes=["vectorize"], time_budget_s=30.0)
    st.budget = Budget(30.0, 0.0, clock=lambda: now[0])
    now[0] = 12.0  # a pair takes 10 s: one more fits (22 s), the next (32 s) does not

    def clocked(launch: Launch, spec: RunSpec) -> Done:
        now[0] += 5.0
        return fake(launch, spec)

    monkeypatch.setattr(command, "run_once", clocked)
    _candidates(st, [_fix("vectorize")])
    assert st.stopped == "time budget"


def test_quick_stops_at_the_fewest_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    labels: list[str] = []
    seeds = iter(range(100))

    def fake(launch: Launch, spec: RunSpec) -> Done:
        labels.append(spec.label)
        return _done(spec, step_s=_noisy(0.01, 0.5, next(seeds)))

    monkeypatch.setattr(command, "run_once", fake)
    st = _state(tmp_path, quick=True, fixes=["vectorize"])
    _candidates(st, [_fix("vectorize")])
    assert labels == ["candidate 1", "baseline 3"] and st.stopped == "minimum runs"


def test_a_little_slower_in_one_run_is_run_again_before_it_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--quick, one fix: candidate 1 measured 1.22x slower by a neighbour's burst. Not clearly
    slower from one run: a second pair runs (even with --quick), and the fix is judged on both
    candidate runs — here the second was as fast as the baselines: not slower, kept as named."""
    labels: list[str] = []

    def fake(launch: Launch, spec: RunSpec) -> Done:
        labels.append(spec.label)
        slow = spec.label == "candidate 1"
        return _done(spec, step_s=[0.122 if slow else 0.1] * 10)

    monkeypatch.setattr(command, "run_once", fake)
    st = _state(tmp_path, quick=True, fixes=["zero-grad"])
    zero = _fix("zero-grad")
    assert _candidates(st, [zero]) == [zero]
    assert labels == ["candidate 1", "baseline 3", "baseline 4", "candidate 2"]
    assert "kept as asked" in zero.notes[-1]


def test_clearly_slower_in_one_run_goes_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    labels: list[str] = []

    def fake(launch: Launch, spec: RunSpec) -> Done:
        labels.append(spec.label)
        return _done(spec, step_s=0.14 if spec.role == "candidate" else 0.1)

    monkeypatch.setattr(command, "run_once", fake)
    st = _state(tmp_path, quick=True, fixes=["zero-grad"])
    zero = _fix("zero-grad")
    assert _candidates(st, [zero]) == [] and labels == ["candidate 1", "baseline 3"]
    assert zero.reason.startswith("1.40x slower") and "from one run" in zero.reason
    assert st.stopped == "minimum runs"  # --quick: the fewest runs, said so


def test_a_fix_alone_a_little_slower_is_run_alone_again(
    state: _State, monkeypatch: pytest.MonkeyPatch
) -> None:
    labels: list[str] = []

    def fake(launch: Launch, spec: RunSpec) -> Done:
        labels.append(spec.label)
        step = 0.05 if spec.role == "candidate" else 0.1
        if spec.label == "only zero-grad":
            step = 0.122
        elif spec.label == "only syncs":
            step = 0.05
        return _done(spec, step_s=step)

    monkeypatch.setattr(command, "run_once", fake)
    syncs, zero = _fix("syncs"), _fix("zero-grad")
    kept = _candidates(state, _ablation(state, [syncs, zero]))
    assert labels[-1] == "only zero-grad (again)"
    assert kept == [syncs] and zero.reason.startswith("no measurable gain")


@pytest.mark.parametrize("quick", [True, False])
def test_a_gpu_only_fix_on_a_cpu_prints_no_measured_gain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quick: bool
) -> None:
    """cuda-graphs asked for by name on a CPU, its candidate measured 1.39x faster by chance:
    neither the headline nor its row prints that gain, with or without --quick; its note says
    why, without a CPU's number."""
    from gpuopt.model.records import Environment
    from gpuopt.optimize.output.render import render_text
    from gpuopt.optimize.output.results import fill_results

    def fake(launch: Launch, spec: RunSpec) -> Done:
        return _done(spec, step_s=0.1 / 1.39 if spec.role == "candidate" else 0.1)

    monkeypatch.setattr(command, "run_once", fake)
    st = _state(tmp_path, fixes=["cuda-graphs"], quick=quick)
    st.doc.baseline = Profile(environment=Environment(device="cpu"))
    graphs = _fix("cuda-graphs")
    assert _candidates(st, [graphs]) == [graphs]
    assert graphs.notes == ["no GPU here: its gain is a GPU's, kept unmeasured"]
    fill_results(st.doc, st.runs, [graphs], [graphs], apply=False, stopped=st.stopped)
    assert st.doc.gain is not None and st.doc.gain.speedup is None and st.doc.speedup is None
    (row,) = st.doc.fixes
    assert row.gain is None
    text = render_text(st.doc).splitlines()
    assert "gain     GPU-only gain, not measured here" in text
    row_line = "cuda-graphs  runtime  yes      exact     GPU-only gain, not measured here  planned"
    assert row_line in text
    assert "  cuda-graphs: note: no GPU here: its gain is a GPU's, kept unmeasured" in text
    assert not any("1.39" in x or "faster" in x for x in text)
