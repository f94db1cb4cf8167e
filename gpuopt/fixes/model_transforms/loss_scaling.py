"""fp16's loss scaling at run time: ``torch.amp.GradScaler`` put around a script that was not
written for it (the ``amp`` fix in float16, for GPUs without bf16 such as V100 or T4).

What the scaler recipe asks of a training loop, done from outside it:

* ``scaler.scale(loss).backward()`` — every backward pass (``loss.backward()``, which calls
  ``torch.autograd.backward``, where the scaling is) starts from the scaled tensor (several
  backward passes a step, as in gradient accumulation, all scaled alike);
* ``scaler.unscale_(optimizer)`` before gradients are clipped — ``clip_grad_norm_`` and
  ``clip_grad_value_`` (patched in ``torch.nn.utils`` before the script starts, so that
  ``from torch.nn.utils import clip_grad_norm_`` gets the patched one) unscale first, once a step;
* ``scaler.step(optimizer)`` then ``scaler.update()`` — the optimizer's ``step`` is wrapped.
  A step the scaler skips (inf or NaN gradients, common in the first steps while the scale
  settles) still calls the optimizer's own ``step`` with every gradient set aside (``None``:
  torch's optimizers leave such parameters untouched), so that its step hooks run: a skipped step
  is still a training step for gpuopt's step clock, and the run makes as many steps as the
  baseline. The gradients are put back afterwards.

The initial scale comes from the first step's own gradients (still in ``.grad`` when the scaling
starts, at the end of that step): the largest power of two up to torch's default 2**16 that
keeps the largest gradient times the scale at most 2**12, 16 times below float16's largest
number. torch's fixed 2**16 overflows whenever a gradient reaches 1 and then skips steps until
the scale has halved enough: in a short verification run every skipped step moves the losses
away from the baseline's.

Limits, each said as a note and then nothing is scaled (the fix is not applied): a run with more
than one optimizer (one scale for several optimizers needs the script's own ``scaler.step`` for
each); an optimizer stepped with a closure runs as written (GradScaler refuses closures). Not
scaled: ``torch.autograd.grad`` (a gradient penalty needs the script's own scaling), so such a
training changes, and verification says so.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any


class LossScaling:
    """The scaler and the patches; :meth:`install` before the script runs, :meth:`activate` at
    the end of the first optimizer step, :meth:`undo` when the run ends."""

    def __init__(self) -> None:
        self.scaler: Any = None
        self.optimizer: Any = None
        self.optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
        self.unscaled = False  # unscale_ already called this step (a clip came first)
        self.in_step = False
        self._in_backward = False
        self.skipped = 0  # steps the scaler skipped (inf/NaN gradients)
        self._undo: list[Callable[[], None]] = []

    # -- before the script -------------------------------------------------------------------
    def install(self) -> None:
        """Count the optimizers the script builds; the clip functions unscale first."""
        import torch

        init = torch.optim.Optimizer.__init__

        def __init__(opt: Any, *args: Any, **kwargs: Any) -> None:
            init(opt, *args, **kwargs)
            self.optimizers.add(opt)

        torch.optim.Optimizer.__init__ = __init__  # type: ignore[method-assign,assignment]
        self._undo.append(lambda: setattr(torch.optim.Optimizer, "__init__", init))
        for name in ("clip_grad_norm_", "clip_grad_value_"):
            self._wrap_clip(name)

    def _wrap_clip(self, name: str) -> None:
        import torch.nn.utils as utils
        import torch.nn.utils.clip_grad as clip_grad

        orig = getattr(clip_grad, name)

        def clip(*args: Any, **kwargs: Any) -> Any:
            self.unscale_once()
            return orig(*args, **kwargs)

        clip.__wrapped__ = orig  # type: ignore[attr-defined]
        clip.__doc__ = orig.__doc__
        for module in (utils, clip_grad):
            setattr(module, name, clip)
            self._undo.append(functools.partial(setattr, module, name, orig))

    # -- at the end of the first step --------------------------------------------------------
    def activate(self, optimizer: Any, device: str) -> str | None:
        """Scale from now on, for ``optimizer``; or the reason it cannot be done (nothing is
        changed then)."""
        import torch

        others = [o for o in self.optimizers if o is not optimizer]
        if others:
            return (
                f"fp16 loss scaling not applied: the script builds {len(others) + 1} "
                "optimizers (one scale for several needs scaler.step for each in the script)"
            )
        self.scaler = torch.amp.GradScaler(device, init_scale=initial_scale(optimizer))
        self.optimizer = optimizer
        self._patch_backward()
        self._patch_step(optimizer)
        return None

    def unscale_once(self) -> None:
        if self.scaler is not None and not self.unscaled and not self.in_step:
            self.scaler.unscale_(self.optimizer)
            self.unscaled = True

    def _patch_backward(self) -> None:
        """Scale in ``torch.autograd.backward``, which ``Tensor.backward`` calls: below every
        ``Tensor.backward`` wrapper (gpuopt's loss record sees the loss as the script computed
        it), and a direct ``torch.autograd.backward(loss)`` is scaled too."""
        import torch.autograd

        orig = torch.autograd.backward

        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if self.scaler is None or self.in_step or self._in_backward:
                return orig(tensors, *args, **kwargs)
            self._in_backward = True
            try:
                if isinstance(tensors, (list, tuple)):
                    tensors = type(tensors)(self.scaler.scale(t) for t in tensors)
                else:
                    tensors = self.scaler.scale(tensors)
                return orig(tensors, *args, **kwargs)
            finally:
                self._in_backward = False

        backward.__wrapped__ = orig  # type: ignore[attr-defined]
        torch.autograd.backward = backward
        self._undo.append(lambda: setattr(torch.autograd, "backward", orig))

    def _patch_step(self, optimizer: Any) -> None:
        own = optimizer.step  # the bound method, with torch's hook-running wrapper
        ran: list[bool] = []

        def inner(*args: Any, **kwargs: Any) -> Any:
            ran.append(True)
            return own(*args, **kwargs)

        def step(*args: Any, **kwargs: Any) -> Any:
            if self.in_step:  # scaler.step calling optimizer.step: the real one
                return inner(*args, **kwargs)
            if args or kwargs:  # a closure: GradScaler refuses it; run as written
                return own(*args, **kwargs)
            ran.clear()
            self.in_step = True
            try:
                result = self.scaler.step(optimizer)
                if not ran:
                    self.skipped += 1
                    result = _step_without_gradients(optimizer, own)
            finally:
                self.in_step = False
            self.scaler.update()
            self.unscaled = False
            return result

        optimizer.step = step
        self._undo.append(lambda: optimizer.__dict__.pop("step", None))

    def undo(self) -> None:
        for fn in reversed(self._undo):
            fn()
        self._undo.clear()
        self.scaler = None


HEADROOM = 2.0**12  # the largest gradient x the initial scale stays at most this
DEFAULT_SCALE = 2.0**16  # torch.amp.GradScaler's own initial scale


def initial_scale(optimizer: Any) -> float:
    """The largest power of two up to :data:`DEFAULT_SCALE` keeping the largest gradient in
    ``optimizer`` times it at most :data:`HEADROOM` (the default when there is no gradient)."""
    import math

    largest = 0.0
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None and p.grad.numel():
                largest = max(largest, float(p.grad.detach().abs().max()))
    if not largest or not math.isfinite(largest):
        return DEFAULT_SCALE
    exponent = math.floor(math.log2(HEADROOM / largest))
    return 2.0 ** max(0, min(16, exponent))


def _step_without_gradients(optimizer: Any, own: Callable[[], Any]) -> Any:
    """The optimizer's own step with every gradient set aside (nothing is updated, its hooks
    run), the gradients put back afterwards."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    grads = [p.grad for p in params]
    for p in params:
        p.grad = None
    try:
        return own()
    finally:
        for p, g in zip(params, grads, strict=True):
            p.grad = g
