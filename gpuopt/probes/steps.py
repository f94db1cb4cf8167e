"""Step boundaries, found without changing the user's script.

A training step ends at each ``optimizer.step()`` of any ``torch.optim.Optimizer`` (a global
post-hook registered with torch), or at each ``gpuopt.step()`` for loops without an optimizer.
With several optimizers (a GAN's generator and discriminator), only the optimizer that stepped
first marks steps, so one iteration is one step. Once the script calls ``gpuopt.step()`` the
explicit marks win and optimizer steps no longer count.

Scripts that update parameters by hand (``param.data.add_(-lr * param.grad)``) step no
optimizer: there the end of each backward pass (``loss.backward()``, i.e. every call of
``torch.autograd.backward``) marks a step, until the first optimizer step is seen. A backward
that runs inside an ``optimizer.step()`` (LBFGS calls its closure, with its backward, many times
in one step) never marks. When an optimizer steps after backward marks, that first optimizer
step moves the iteration's boundary rather than adding one: the step count stays one per
iteration, and from then on optimizer steps mark (the one short step, the first, is warm-up).
``marker`` is the marker that marked the last step: ``optimizer.step`` / ``loss.backward`` /
``gpuopt.step``.

The clock is injectable (tests pass a fake); the listeners are the runner's probes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

StepListener = Callable[[int, float], None]

OPTIMIZER = "optimizer.step"
BACKWARD = "loss.backward"
EXPLICIT = "gpuopt.step"


class StopRun(BaseException):
    """Raised from a step boundary when ``--steps N`` is reached: ends the script cleanly.

    A ``BaseException`` so that a user's ``except Exception`` does not swallow it.
    """


@dataclass
class StepClock:
    """Collects step end times and tells listeners; raises :class:`StopRun` after ``max_steps``."""

    clock: Callable[[], float] = time.perf_counter
    max_steps: int | None = None
    ends: list[float] = field(default_factory=list)
    sources: set[str] = field(default_factory=set)
    listeners: list[StepListener] = field(default_factory=list)
    marker: str | None = None  # what marked the last step
    _first_optimizer: int | None = None
    _explicit: bool = False
    _optimizer_depth: int = 0  # > 0 while an optimizer's step() runs
    stopping: bool = False

    def mark(self, source: str = EXPLICIT, optimizer: Any = None) -> None:
        if self.stopping:
            return
        if source == EXPLICIT:
            self._explicit = True
        elif self._explicit:
            return
        elif source == BACKWARD:
            if self._optimizer_depth or self._first_optimizer is not None:
                return
        elif optimizer is not None:
            oid = id(optimizer)
            if self._first_optimizer is None:
                self._first_optimizer = oid
                if self.marker == BACKWARD:
                    # The iteration's boundary was already counted at its backward: this step
                    # moves it (no extra step); optimizer steps mark from now on.
                    self.marker = OPTIMIZER
                    return
            elif oid != self._first_optimizer:
                return
        self._tick(source)

    def _tick(self, source: str) -> None:
        t = self.clock()
        index = len(self.ends)
        self.ends.append(t)
        self.sources.add(source)
        self.marker = source
        for fn in list(self.listeners):
            fn(index, t)
        if self.max_steps is not None and len(self.ends) >= self.max_steps:
            self.stopping = True
            raise StopRun()

    def optimizer_entered(self) -> None:
        self._optimizer_depth += 1

    def optimizer_left(self) -> None:
        self._optimizer_depth = max(self._optimizer_depth - 1, 0)

    @property
    def count(self) -> int:
        return len(self.ends)


_ACTIVE: StepClock | None = None
_HOOK_HANDLES: list[Any] = []
_BACKWARD_ORIGINAL: Any = None


def active_clock() -> StepClock | None:
    return _ACTIVE


def mark_step(source: str = EXPLICIT) -> None:
    """``gpuopt.step()``: a no-op outside ``gpuopt profile``."""
    if _ACTIVE is not None:
        _ACTIVE.mark(source)


def _optimizer_pre_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
    if _ACTIVE is not None:
        _ACTIVE.optimizer_entered()


def _optimizer_post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
    if _ACTIVE is not None:
        _ACTIVE.optimizer_left()
        _ACTIVE.mark(OPTIMIZER, optimizer=optimizer)


def _backward_wrapper(original: Any) -> Any:
    def backward(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        if _ACTIVE is not None:
            _ACTIVE.mark(BACKWARD)
        return out

    backward.__wrapped__ = original  # type: ignore[attr-defined]
    backward.__doc__ = original.__doc__
    return backward


def install(clock: StepClock) -> None:
    """Make ``clock`` the active one, hook every optimizer's ``step()`` and wrap
    ``torch.autograd.backward`` (``Tensor.backward`` calls it)."""
    global _ACTIVE, _BACKWARD_ORIGINAL
    _ACTIVE = clock
    if not _HOOK_HANDLES:
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        _HOOK_HANDLES.append(register_optimizer_step_pre_hook(_optimizer_pre_hook))
        _HOOK_HANDLES.append(register_optimizer_step_post_hook(_optimizer_post_hook))
    if _BACKWARD_ORIGINAL is None:
        import torch.autograd

        _BACKWARD_ORIGINAL = torch.autograd.backward
        torch.autograd.backward = _backward_wrapper(_BACKWARD_ORIGINAL)


def uninstall() -> None:
    global _ACTIVE, _BACKWARD_ORIGINAL
    _ACTIVE = None
    while _HOOK_HANDLES:
        _HOOK_HANDLES.pop().remove()
    if _BACKWARD_ORIGINAL is not None:
        import torch.autograd

        torch.autograd.backward = _BACKWARD_ORIGINAL
        _BACKWARD_ORIGINAL = None
