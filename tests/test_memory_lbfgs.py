"""A closure-taking optimizer's step (LBFGS): the closure's first evaluation recorded as the
program, LBFGS's flat vectors modelled from torch's source, both against the real CPU step
measured by gpuopt's tracker (which matches torch's MemTracker byte for byte:
test_memory_model; MemTracker itself refuses a step that calls the model again and again)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from gpuopt.memory import lbfgs
from gpuopt.memory.capture import CapturedStep, StepRecorder, optimizer_state_bytes
from gpuopt.memory.predict import PredictInput, predict
from gpuopt.memory.replay import ReplayOptions, replay
from gpuopt.memory.tracker import StepTracker

BATCH = 128


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(16, 128), nn.Tanh(), nn.Linear(128, 128), nn.Tanh(), nn.Linear(128, 1)
    )


def _measured(model: nn.Module, opt: Any, closure: Any, held: list[Any]) -> int:
    """The real step's peak, every tensor alive counted (LBFGS's history lists too)."""
    params = list(model.parameters())
    t = StepTracker(block=1, auto_phase=True)
    t.add(params, "parameters")
    t.add([p.grad for p in params if p.grad is not None], "gradients")
    state = [
        w
        for s in opt.state.values()
        for v in s.values()
        for w in (v if isinstance(v, list) else [v])
        if isinstance(w, torch.Tensor)
    ]
    t.add(state, "optimizer_state")
    del state  # (a history pair dropped in the step must be freed)
    t.add(held, "other")
    t.reset_peak()
    t.install_hooks(params)
    try:
        with t.mode():
            opt.step(closure)
    finally:
        t.remove_hooks()
    return t.peak


def _train(make_opt: Any, steps: int) -> tuple[CapturedStep, list[int]]:
    """A script's loop: ``opt.step(closure)``, an evaluation under no_grad after each step;
    every step measured for real."""
    model = _model()
    opt = make_opt(model.parameters())
    x, y = torch.randn(BATCH, 16), torch.randn(BATCH, 1)
    rec = StepRecorder()
    peaks = []
    rec.start()
    try:
        for _ in range(steps):

            def closure() -> Any:
                opt.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                return loss

            peaks.append(_measured(model, opt, closure, [x, y]))
            rec.step_ended()
            with torch.no_grad():
                model(x[:4])
    finally:
        rec.stop()
    return rec.step, peaks


def _cpu(step: CapturedStep, **kw: Any) -> int:
    return replay(step, ReplayOptions(BATCH, emulate_cuda=False, block=1, **kw)).peak_bytes


@pytest.mark.slow
def test_the_closures_first_evaluation_is_the_program() -> None:
    step, _ = _train(lambda p: torch.optim.LBFGS(p, max_iter=5), steps=2)
    names = [step.entries[i].name for i in step.needed()]
    assert names == ["Sequential", "mse_loss", "backward", "LBFGS"]
    assert step.closure and step.complete and step.batch_size == BATCH
    # the closure frees the gradients before its forward (the no_grad call after the step sees
    # them allocated: that is not what the closure's forward runs with)
    assert step.grads_during_forward is False
    # the state's size as it is counts LBFGS's history lists: 2 steps of 5 iterations, 9 pairs
    flat = sum(p.numel() * 4 for p in step.optimizer.param_groups[0]["params"])
    assert optimizer_state_bytes(step.optimizer) >= (2 * 9 + 2) * flat
    from torch.overrides import _get_current_function_mode_stack

    assert not _get_current_function_mode_stack()  # type: ignore[no-untyped-call]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("max_iter", "history", "steps"),
    [(20, 100, 2), (20, 10, 3), (6, 4, 4), (1, 100, 3)],
)
def test_lbfgs_replay_matches_each_real_step(max_iter: int, history: int, steps: int) -> None:
    """Step k of the run replayed with the history of step k: within 1% of the real step
    (every iteration runs: the loss is far from converged in a few steps)."""
    step, peaks = _train(
        lambda p: torch.optim.LBFGS(p, lr=0.5, max_iter=max_iter, history_size=history), steps
    )
    for k, truth in enumerate(peaks, start=1):
        fake = _cpu(step, lbfgs_step=k)
        assert abs(fake - truth) / truth < 0.01, (k, fake, truth)
    # the default: the step from which memory stops growing, never less than the last measured
    steady = lbfgs.steady_step(max_iter, history)
    assert _cpu(step) == _cpu(step, lbfgs_step=steady) >= _cpu(step, lbfgs_step=steps)


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_the_history_counted_from_torchs_source() -> None:
    """With torch's defaults: 19 pairs after the first step, 20 more each step, 100 at most;
    the parameters' flat size is what each vector costs."""
    first, second = lbfgs.walk(2, 20, 100)
    assert (first.pairs_after, second.pairs_after) == (19, 39)
    assert lbfgs.steady_step(20, 100) == 6
    fifth, sixth, seventh = lbfgs.walk(7, 20, 100)[4:]
    assert sixth.pairs == seventh.pairs == 100 and fifth.pairs == 98
    assert fifth.after_closure < sixth.after_closure == seventh.after_closure


@pytest.mark.slow
def test_the_prediction_says_which_step_it_is_for() -> None:
    step, _ = _train(lambda p: torch.optim.LBFGS(p, max_iter=20), steps=1)
    p = predict(PredictInput(step, 80 << 30, 0.1, 30.0))
    text = " ".join(p.notes)
    assert "LBFGS modelled, not run" in text and "a step with a full history (step 6 on)" in text
    assert "the first step holds 40 + 3 (" in text
    assert p.peak_bytes is not None and p.peak_bytes > 205 * 4 * sum(
        q.numel() for q in _model().parameters()
    )


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_another_optimizers_closure_is_recorded_too() -> None:
    """SGD.step(closure): the closure's forward and backward are the program, SGD's step is
    replayed as usual (it reads no values)."""
    step, peaks = _train(lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9), steps=3)
    assert [step.entries[i].name for i in step.needed()][-1] == "SGD"
    fake = _cpu(step)
    assert abs(fake - peaks[-1]) / peaks[-1] < 0.01, (fake, peaks)
