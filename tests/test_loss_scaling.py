"""fp16's loss scaling put around a plain training loop
(gpuopt.fixes.model_transforms.loss_scaling): the scale is a power of two, so with no autocast
the training is bit for bit the plain one — which proves the loss is scaled and the gradients
unscaled exactly once, also through clip_grad_norm_; a step the scaler skips still runs the
optimizer's step hooks and changes nothing; several optimizers are refused."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from gpuopt.fixes.model_transforms.loss_scaling import LossScaling, initial_scale


@pytest.fixture()
def scaling() -> Iterator[LossScaling]:
    s = LossScaling()
    s.install()
    try:
        yield s
    finally:
        s.undo()


def train(scaling: LossScaling | None, clip: bool) -> tuple[list[torch.Tensor], list[float]]:
    """Five steps of a small model; the scaling activated after the first step, as gpuopt does."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = torch.randn(5, 16, 4)
    norms: list[float] = []
    for step in range(5):
        opt.zero_grad()
        model(data[step]).square().mean().backward()
        if clip:
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)))
        opt.step()
        if step == 0 and scaling is not None:
            assert scaling.activate(opt, "cpu") is None
    return [p.detach().clone() for p in model.parameters()], norms


@pytest.mark.parametrize("clip", [False, True], ids=["plain", "clip_grad_norm_"])
def test_scaled_training_is_the_plain_training_bit_for_bit(
    scaling: LossScaling, clip: bool
) -> None:
    plain, plain_norms = train(None, clip)
    scaled, scaled_norms = train(scaling, clip)
    assert scaling.scaler is not None and scaling.scaler.get_scale() >= 2.0**10  # it did scale
    assert scaled_norms == plain_norms  # clipping saw the unscaled gradients
    assert all(torch.equal(a, b) for a, b in zip(plain, scaled, strict=True))
    assert scaling.skipped == 0


def test_the_loss_is_scaled_between_backward_and_step(scaling: LossScaling) -> None:
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([w], lr=0.1)
    (w * 2).sum().backward()
    opt.step()  # the first step, as written
    assert scaling.activate(opt, "cpu") is None
    opt.zero_grad()
    (w * 2).sum().backward()
    # 2**11: the first step's gradient (2) x 2**11 = 2**12
    assert torch.equal(w.grad, torch.full((3,), 2.0 * 2048))  # scaled, as the recipe leaves it
    opt.step()
    assert torch.equal(w.detach(), torch.full((3,), 1.0 - 0.2 - 0.2))  # stepped unscaled


def test_scaled_once_under_a_torch_function_mode(scaling: LossScaling) -> None:
    """Tensor.backward dispatches through function modes (gpuopt's recorder is one) by calling
    the class's backward again: the loss is still scaled once."""
    from torch.overrides import TorchFunctionMode

    class PassThrough(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            return func(*args, **(kwargs or {}))

    plain, _ = train(None, clip=True)
    with PassThrough():
        scaled, _ = train(scaling, clip=True)
    assert all(torch.equal(a, b) for a, b in zip(plain, scaled, strict=True))


def test_a_step_with_inf_gradients_is_skipped_but_still_a_step(scaling: LossScaling) -> None:
    w = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([w], lr=0.1, momentum=0.9)
    steps: list[int] = []
    handle = register_optimizer_step_post_hook(lambda o, a, k: steps.append(1))
    try:
        (w * 1.0).sum().backward()
        opt.step()
        assert scaling.activate(opt, "cpu") is None
        before = w.detach().clone()
        opt.zero_grad()
        (w * 1e35).sum().backward()  # x 4096: beyond float32's range, inf gradients
        opt.step()
        assert torch.equal(w.detach(), before)  # nothing updated
        assert w.grad is not None and torch.isinf(w.grad).all()  # gradients put back
        assert len(steps) == 2 and scaling.skipped == 1  # the step clock saw the step
        assert scaling.scaler.get_scale() == 2048.0  # the scale backed off from 4096
        opt.zero_grad()
        (w * 1.0).sum().backward()
        opt.step()
        assert not torch.equal(w.detach(), before) and len(steps) == 3
    finally:
        handle.remove()


def test_several_optimizers_are_refused_and_nothing_is_patched(scaling: LossScaling) -> None:
    a = torch.nn.Parameter(torch.ones(2))
    b = torch.nn.Parameter(torch.ones(2))
    opt_a, _opt_b = torch.optim.SGD([a], lr=0.1), torch.optim.SGD([b], lr=0.1)
    why = scaling.activate(opt_a, "cpu")
    assert why is not None and "2 optimizers" in why
    assert scaling.scaler is None and "step" not in opt_a.__dict__
    a.sum().backward()
    assert torch.equal(a.grad, torch.ones(2))  # backward not scaled


def test_undo_puts_torch_back() -> None:
    backward, clip = torch.autograd.backward, torch.nn.utils.clip_grad_norm_
    init = torch.optim.Optimizer.__init__
    s = LossScaling()
    s.install()
    w = torch.nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([w], lr=0.1)
    assert s.activate(opt, "cpu") is None
    assert torch.autograd.backward is not backward and torch.nn.utils.clip_grad_norm_ is not clip
    s.undo()
    assert torch.autograd.backward is backward and torch.nn.utils.clip_grad_norm_ is clip
    assert torch.nn.utils.clip_grad.clip_grad_norm_ is clip
    assert torch.optim.Optimizer.__init__ is init and "step" not in opt.__dict__


@pytest.mark.parametrize(
    ("largest", "scale"),
    [
        (None, 2.0**16),
        (0.0, 2.0**16),
        (1e-9, 2.0**16),
        (0.5, 2.0**13),
        (4.0, 2.0**10),
        (5000.0, 1.0),
        (float("inf"), 2.0**16),
    ],
)
def test_initial_scale_keeps_the_largest_gradient_below_the_headroom(
    largest: float | None, scale: float
) -> None:
    w = torch.nn.Parameter(torch.zeros(3))
    if largest is not None:
        w.grad = torch.tensor([0.0, -largest, largest / 2])
    assert initial_scale(torch.optim.SGD([w], lr=0.1)) == scale
