"""Step boundaries on scripts without an optimizer, LBFGS closures and runs too short for the
recorder's window: the marker used, the warm-up used, and nothing reported per step
that ran outside training steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import SCRIPTS, run_gpuopt
from fakes import FakeClock

from gpuopt.probes import steps as steps_mod
from gpuopt.probes.protocol import RunContext


def _profile(out: Path) -> dict:
    return json.loads((out / "profile.json").read_text())


def _line(script: str, marker: str) -> str:
    """``path:line`` of the one line of a test script carrying ``# <marker>``."""
    path = SCRIPTS / script
    (line,) = [
        i for i, text in enumerate(path.read_text().splitlines(), 1) if f"# {marker}" in text
    ]
    return f"tests/data/scripts/{script}:{line}"


# -- the step clock -------------------------------------------------------------------------


def test_backward_marks_steps_until_an_optimizer_steps() -> None:
    clock = FakeClock()
    sc = steps_mod.StepClock(clock=clock)
    for _ in range(3):  # hand-written updates: each backward ends a step
        clock.advance(1)
        sc.mark(steps_mod.BACKWARD)
    assert sc.count == 3 and sc.marker == "loss.backward"
    opt = object()
    sc.optimizer_entered()
    sc.optimizer_left()
    sc.mark(steps_mod.OPTIMIZER, optimizer=opt)  # moves the boundary: no extra step
    assert sc.count == 3 and sc.marker == "optimizer.step"
    sc.mark(steps_mod.BACKWARD)  # an optimizer has stepped: backward no longer marks
    sc.mark(steps_mod.OPTIMIZER, optimizer=opt)
    assert sc.count == 4 and sc.sources == {"optimizer.step"}  # the boundary moved
    sc.mark(steps_mod.EXPLICIT)  # gpuopt.step() wins over both
    sc.mark(steps_mod.OPTIMIZER, optimizer=opt)
    sc.mark(steps_mod.BACKWARD)
    assert sc.count == 5 and sc.marker == "gpuopt.step"


def _steps_of(pattern: str) -> steps_mod.StepClock:
    """A clock after the optimizer steps of ``pattern``, one letter per optimizer, a second
    apart."""
    clock = FakeClock(0.0)
    sc = steps_mod.StepClock(clock=clock)
    optimizers: dict[str, object] = {}
    for name in pattern:
        clock.advance(1)
        sc.mark(steps_mod.OPTIMIZER, optimizer=optimizers.setdefault(name, object()))
    return sc


def test_optimizers_stepping_in_one_iteration_are_one_step() -> None:
    assert _steps_of("DG" * 10).count == 10  # a GAN: the discriminator's steps mark
    assert _steps_of("ABC" * 4).count == 4  # three optimizers over parts of one model
    assert _steps_of("DDDDDG" * 3).count == 15  # five critic steps per generator step


def test_optimizers_stepping_in_turn_each_count() -> None:
    """Each layer trained by its own optimizer in turn (pytorch/examples'
    mnist_forward_forward): 50 steps of one, then 50 of the other, are 100 steps; the first
    step of the second phase ends at the time it ran."""
    sc = _steps_of("A" * 50 + "B" * 50)
    assert sc.count == 100 and sc.sources == {"optimizer.step"}
    assert sc.ends == [float(t) for t in range(1, 101)]
    assert _steps_of("A" * 5 + "B" * 5 + "A" * 5).count == 15
    assert _steps_of("A" * 4 + "BC" * 3).count == 4 + 3  # a phase of two optimizers at once


def test_a_step_of_a_new_phase_reaches_the_listeners_in_order() -> None:
    clock = FakeClock(0.0)
    sc = steps_mod.StepClock(clock=clock)
    heard: list[tuple[int, float]] = []
    sc.listeners.append(lambda i, t: heard.append((i, t)))
    a, b = object(), object()
    for opt in (a, a, b, b):
        clock.advance(1)
        sc.mark(steps_mod.OPTIMIZER, optimizer=opt)
    assert heard == [(0, 1.0), (1, 2.0), (2, 3.0), (3, 4.0)]


def test_backward_inside_an_optimizer_step_never_marks() -> None:
    sc = steps_mod.StepClock(clock=FakeClock())
    sc.optimizer_entered()  # LBFGS runs its closure, with backward, inside step()
    for _ in range(5):
        sc.mark(steps_mod.BACKWARD)
    sc.optimizer_left()
    sc.mark(steps_mod.OPTIMIZER, optimizer=object())
    assert sc.count == 1 and sc.marker == "optimizer.step"


def test_installed_hooks_find_steps_of_real_torch_loops() -> None:
    sc = steps_mod.StepClock(clock=FakeClock())
    steps_mod.install(sc)
    try:
        w = torch.nn.Parameter(torch.ones(3))
        for _ in range(4):  # manual updates
            (w * 2).sum().backward()
            with torch.no_grad():
                w -= 0.1 * w.grad
        assert sc.count == 4 and sc.marker == "loss.backward"
        lbfgs_clock = steps_mod.StepClock(clock=FakeClock())
        steps_mod.install(lbfgs_clock)
        v = torch.nn.Parameter(torch.ones(3))
        opt = torch.optim.LBFGS([v], max_iter=5)

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = ((v - 3) ** 2).sum()
            loss.backward()
            return loss

        for _ in range(2):
            opt.step(closure)
        assert lbfgs_clock.count == 2 and lbfgs_clock.sources == {"optimizer.step"}
    finally:
        steps_mod.uninstall()
    assert not hasattr(torch.autograd.backward, "__wrapped__")  # restored
    assert not hasattr(torch.Tensor.backward, "__wrapped__")


def test_once_an_optimizer_marks_its_pre_hook_and_the_backward_wrappers_go() -> None:
    """From the first optimizer step on, a backward can never mark: the steps after it pay
    neither the wrappers nor the pre-step hook, and are still counted."""
    from torch.optim.optimizer import _global_optimizer_pre_hooks

    sc = steps_mod.StepClock(clock=FakeClock())
    steps_mod.install(sc)
    try:
        assert hasattr(torch.Tensor.backward, "__wrapped__")
        assert steps_mod._optimizer_pre_hook in _global_optimizer_pre_hooks.values()
        w = torch.nn.Parameter(torch.ones(3))
        opt = torch.optim.SGD([w], lr=0.1)
        for _ in range(3):
            (w * 2).sum().backward()
            opt.step()
        assert sc.count == 3 and sc.sources == {"optimizer.step"}
        assert not hasattr(torch.Tensor.backward, "__wrapped__")
        assert not hasattr(torch.autograd.backward, "__wrapped__")
        assert steps_mod._optimizer_pre_hook not in _global_optimizer_pre_hooks.values()
        again = steps_mod.StepClock(clock=FakeClock())
        steps_mod.install(again)  # a new run in this process: a backward may mark again
        assert hasattr(torch.Tensor.backward, "__wrapped__")
        assert steps_mod._optimizer_pre_hook in _global_optimizer_pre_hooks.values()
    finally:
        steps_mod.uninstall()
    assert steps_mod._optimizer_pre_hook not in _global_optimizer_pre_hooks.values()


def test_a_wrapper_the_script_put_over_backward_stays_when_gpuopt_takes_its_out() -> None:
    sc = steps_mod.StepClock(clock=FakeClock())
    steps_mod.install(sc)
    inner = torch.Tensor.backward
    calls: list[int] = []

    def users_backward(self: torch.Tensor, *args: object, **kwargs: object) -> None:
        calls.append(1)
        inner(self, *args, **kwargs)

    try:
        torch.Tensor.backward = users_backward  # type: ignore[method-assign,assignment]
        w = torch.nn.Parameter(torch.ones(3))
        opt = torch.optim.SGD([w], lr=0.1)
        for _ in range(2):
            (w * 2).sum().backward()
            opt.step()
        assert torch.Tensor.backward is users_backward and calls == [1, 1]
        assert sc.count == 2
    finally:
        steps_mod.uninstall()
        torch.Tensor.backward = inner.__wrapped__  # type: ignore[attr-defined,method-assign]
    assert not hasattr(torch.Tensor.backward, "__wrapped__")


def test_a_listener_that_is_done_is_not_called_again() -> None:
    sc = steps_mod.StepClock(clock=FakeClock())
    heard: dict[str, list[int]] = {"done": [], "more": []}

    def done_after_two(index: int, t: float) -> object:
        heard["done"].append(index)
        return steps_mod.DONE if index >= 1 else None

    def more(index: int, t: float) -> None:
        heard["more"].append(index)

    sc.listeners += [done_after_two, more]
    for _ in range(4):
        sc.mark()
    assert heard == {"done": [0, 1], "more": [0, 1, 2, 3]}
    assert sc.listeners == [more]


def test_the_framework_probe_asks_for_no_more_steps_once_it_has_looked() -> None:
    from gpuopt.probes.framework import LOOK_STEPS, FrameworkProbe

    probe = FrameworkProbe()
    probe.start(RunContext(script="x.py", user_roots=[SCRIPTS], out_dir=SCRIPTS))
    assert [probe.on_step(i, 0.0) for i in range(LOOK_STEPS + 1)] == [None] * LOOK_STEPS + [
        steps_mod.DONE
    ]


def test_a_steps_own_cost_counts_the_optimizer_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    """gpuopt's own clock moving a second a read: the first step's cost holds the pre-step
    hook's read pair and the post-step hook's (from its first read to the step's end); later
    steps, the pre-step hook gone, the post-step hook's only."""
    from gpuopt.probes import own_cost

    ticks = iter(range(1000))
    monkeypatch.setattr(own_cost, "clock", lambda: float(next(ticks)))
    own_cost.reset()
    sc = steps_mod.StepClock(clock=FakeClock())
    steps_mod.install(sc)
    try:
        opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(3))], lr=0.1)
        for _ in range(3):
            opt.step()  # no backward: every boundary is the optimizer's
    finally:
        steps_mod.uninstall()
    assert own_cost.step_costs == [2.0, 1.0, 1.0]
    own_cost.reset()


# -- whole runs -----------------------------------------------------------------------------


def test_hand_written_updates_are_steps_marked_by_backward(tmp_path: Path) -> None:
    """pytorch/examples regression/main.py: no optimizer, `param.data.add_(...)` after
    `loss.backward()`; the `.item()` of each step is found, the marker is said everywhere."""
    r = run_gpuopt("profile", "-o", str(tmp_path), str(SCRIPTS / "hand_updates.py"))
    assert r.returncode == 0, r.stderr
    doc = _profile(tmp_path)
    assert doc["steps"]["count"] == 12 and doc["steps"]["marker"] == "loss.backward"
    assert doc["dispatch"]["window_steps"] == 3
    assert [(s["site"], s["count_per_step"]) for s in doc["syncs"]] == [
        (_line("hand_updates.py", "PER-STEP-ITEM"), 1)
    ]
    assert "sync-in-step" in {f["id"] for f in doc["findings"]}
    assert "marked by loss.backward() (no optimizer.step() seen)" in r.stdout
    for fmt in ("md", "html"):
        shown = run_gpuopt("report", str(tmp_path), "--format", fmt)
        assert shown.returncode == 0 and "marked by loss.backward()" in shown.stdout


def test_lbfgs_window_records_the_closures_item_not_code_after_training(tmp_path: Path) -> None:
    """With --warmup 1 the window records step 1: the closure's `.item()` (once per closure
    call, several per step) is the step's sync; the prediction loop after training is not."""
    r = run_gpuopt(
        "profile", "--quiet", "--warmup", "1", "-o", str(tmp_path),
        str(SCRIPTS / "lbfgs_closure.py"), "--steps", "2",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = _profile(tmp_path)
    assert doc["steps"]["count"] == 2 and doc["steps"]["marker"] == "optimizer.step"
    (sync,) = doc["syncs"]
    assert sync["site"] == _line("lbfgs_closure.py", "CLOSURE-ITEM")
    assert sync["count_per_step"] >= 2


def test_gpuopt_steps_leaves_a_recorded_step_after_warmup(tmp_path: Path) -> None:
    """`--steps 2` with the default --warmup 2: warm-up 1 is used (said once, the same in the
    header, the series and the window), and step 1 is recorded."""
    r = run_gpuopt(
        "profile", "--steps", "2", "-o", str(tmp_path),
        str(SCRIPTS / "lbfgs_closure.py"), "--steps", "5",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = _profile(tmp_path)
    assert doc["steps"]["count"] == 2 and doc["steps"]["warmup"] == 1
    assert [s["warmup"] for s in doc["steps"]["series"]] == [True, False]
    assert (doc["dispatch"]["window_start"], doc["dispatch"]["window_steps"]) == (1, 1)
    assert [s["site"] for s in doc["syncs"]] == [_line("lbfgs_closure.py", "CLOSURE-ITEM")]
    assert "1 warm-up" in r.stdout
    # The closure is not an iteration of the training loop around its definition: before, the
    # `for` was "a Python loop of N iterations per step" (one per closure call, issued through
    # optimizer.step), a false loop-indexing finding on the real script.
    training_loop = _line("lbfgs_closure.py", "TRAIN-LOOP")
    assert training_loop not in [entry["site"] for entry in doc["loops"]]
    assert not [f for f in doc["findings"] if f["id"] == "loop-indexing"]


@pytest.mark.parametrize("fmt", ["text", "md"])
def test_too_few_steps_are_recorded_at_the_last_warm_up_step(tmp_path: Path, fmt: str) -> None:
    """The script's own `--steps 2` ends training before the window (after --warmup 2) saw a
    step: its last warm-up step, recorded in case, stands for the window (the
    closure's syncs are found); what ran after the last boundary (the prediction loop) is still
    not reported per step."""
    r = run_gpuopt(
        "profile", "--format", fmt, "-o", str(tmp_path),
        str(SCRIPTS / "lbfgs_closure.py"), "--steps", "2",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = _profile(tmp_path)
    assert doc["dispatch"]["window_start"] == 1 and doc["dispatch"]["ops_per_step"]
    closure = _line("lbfgs_closure.py", "CLOSURE-ITEM")
    predict = _line("lbfgs_closure.py", "PREDICT-ITEM")
    assert [s["site"] for s in doc["syncs"]] == [closure]
    assert doc["syncs"][0]["count_per_step"] >= 2  # the closure runs several times a step
    assert predict not in [s["site"] for s in doc["syncs"]]
    assert any("recorded in case" in w for w in doc["warnings"])
    assert doc["steps"]["instrumented"] == [1]
    # one warm-up everywhere: none was left out (2 steps, not more than --warmup 2)
    assert doc["steps"]["warmup"] == 0
    assert not any(s["warmup"] for s in doc["steps"]["series"])
    assert "0 warm-up" in r.stdout and "warm-up step(s) dimmed" not in r.stdout
