"""Step boundaries, found without changing the user's script.

A training step ends at each ``optimizer.step()`` of any ``torch.optim.Optimizer`` (a global
post-hook registered with torch), or at each ``gpuopt.step()`` for loops without an optimizer.
With several optimizers, one of them marks steps at a time, so that a step is what a user counts
as one: optimizers that step in the same iteration of the loop (a GAN's discriminator and
generator, two optimizers over parts of one model) are one step, marked by the one that stepped
first. Optimizers that step in turn (each layer trained by its own optimizer, one after the
other; a pre-training phase, then fine-tuning with another) each count: when another optimizer
steps twice with no step of the marking one in between, a new phase has begun, and it marks from
then on. Its first step of the phase ended a step of its own: that step is counted when the
second is seen, with the time it ended (the probes hear of both boundaries then).
Once the script calls ``gpuopt.step()`` the explicit marks win and optimizer steps no longer
count.

Scripts that update parameters by hand (``param.data.add_(-lr * param.grad)``) step no
optimizer: there the end of each backward pass (``loss.backward()``, i.e. every call of
``torch.autograd.backward``) marks a step, until the first optimizer step is seen. A backward
that runs inside an ``optimizer.step()`` (LBFGS calls its closure, with its backward, many times
in one step) never marks. When an optimizer steps after backward marks, that first optimizer
step moves the iteration's boundary rather than adding one: the step count stays one per
iteration, and from then on optimizer steps mark (the one short step, the first, is warm-up).
``marker`` is the marker that marked the last step: ``optimizer.step`` / ``loss.backward`` /
``gpuopt.step``; ``sources`` every marker that marked a step (a moved boundary counts as the
optimizer's).

Once an optimizer marks steps, a backward pass can no longer mark one: the backward wrappers and
the optimizer's pre-step hook (which only tells a backward inside ``optimizer.step()`` apart) are
taken out then, so the steps after the first pay for neither. A listener that has nothing more
to do returns :data:`DONE` and is not called again.

The clock is injectable (tests pass a fake); the listeners are the runner's probes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from msgspec import Struct, field

from gpuopt.probes import own_cost
from gpuopt.probes.protocol import DONE

StepListener = Callable[[int, float], object]  # returns DONE when it wants no more boundaries

OPTIMIZER = "optimizer.step"
BACKWARD = "loss.backward"
EXPLICIT = "gpuopt.step"


class StopRun(BaseException):
    """Raised from a step boundary when ``--steps N`` is reached: ends the script cleanly.

    A ``BaseException`` so that a user's ``except Exception`` does not swallow it.
    """


class StepClock(Struct):
    """Collects step end times and tells listeners; raises :class:`StopRun` after ``max_steps``."""

    clock: Callable[[], float] = time.perf_counter
    max_steps: int | None = None
    ends: list[float] = field(default_factory=list)
    sources: set[str] = field(default_factory=set)
    listeners: list[StepListener] = field(default_factory=list)
    marker: str | None = None  # what marked the last step
    _first_optimizer: int | None = None  # the optimizer whose steps mark (id)
    # other optimizers that stepped since the marking one last did: id -> the time of that step
    _others: dict[int, float] = field(default_factory=dict)
    _explicit: bool = False
    _optimizer_depth: int = 0  # > 0 while an optimizer's step() runs
    stopping: bool = False

    def mark(
        self, source: str = EXPLICIT, optimizer: Any = None, entered: float | None = None
    ) -> bool:
        """A boundary seen by ``source``; whether it ended a step. ``entered``: when gpuopt's
        code that saw it began (own_cost's clock), counted in the step's own cost."""
        if self.stopping:
            return False
        if source == EXPLICIT:
            self._explicit = True
        elif self._explicit:
            return False
        elif source == BACKWARD:
            if self._optimizer_depth or self._first_optimizer is not None:
                return False
        elif optimizer is not None:
            if not self._optimizer_marks(id(optimizer)):
                return False
        self._tick(source, entered=entered)
        return True

    @property
    def optimizer_marks(self) -> bool:
        """Whether an optimizer's steps mark (from then on a backward never does)."""
        return self._first_optimizer is not None and not self._explicit

    def _optimizer_marks(self, oid: int) -> bool:
        """Whether this step of optimizer ``oid`` ends a step (see the module doc)."""
        if self._first_optimizer is None:
            self._first_optimizer = oid
            if self.marker == BACKWARD:
                # The iteration's boundary was already counted at its backward: this step
                # moves it (no extra step); optimizer steps mark from now on.
                self.marker = OPTIMIZER
                self.sources.discard(BACKWARD)
                self.sources.add(OPTIMIZER)
                return False
            return True
        if oid == self._first_optimizer:
            self._others.clear()
            return True
        first = self._others.get(oid)
        if first is None:  # in the marking optimizer's iteration, so far
            self._others[oid] = self.clock()
            return False
        # A second step with none of the marking optimizer's between: it marks from now on, and
        # its first step of this phase ended a step of its own.
        self._first_optimizer = oid
        self._others.clear()
        self._tick(OPTIMIZER, first)
        return True

    def _tick(self, source: str, at: float | None = None, entered: float | None = None) -> None:
        heard = own_cost.clock() if entered is None else entered
        t = self.clock() if at is None else at
        index = len(self.ends)
        self.ends.append(t)
        if source not in self.sources:  # a test, not a call: set.add each step is a call more
            self.sources.add(source)
        self.marker = source
        for fn in list(self.listeners):
            if fn(index, t) is DONE:
                self.listeners.remove(fn)
        # the step's cost to gpuopt so far, with its listeners' (a call less than a function)
        own_cost.step_costs.append(own_cost.spent + own_cost.clock() - heard)
        own_cost.spent = 0.0
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
_PRE_HOOK: list[Any] = []  # the optimizer's pre-step hook, while a backward may still mark


def active_clock() -> StepClock | None:
    return _ACTIVE


def mark_step(source: str = EXPLICIT) -> None:
    """``gpuopt.step()``: a no-op outside ``gpuopt profile``."""
    if _ACTIVE is not None:
        _ACTIVE.mark(source)


def _optimizer_pre_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
    if _ACTIVE is not None:
        entered = own_cost.clock()
        _ACTIVE.optimizer_entered()
        own_cost.spent += own_cost.clock() - entered


def _optimizer_post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
    clock = _ACTIVE
    if clock is None:
        return
    entered = own_cost.clock()
    clock.optimizer_left()
    if not clock.mark(OPTIMIZER, optimizer=optimizer, entered=entered):
        own_cost.spent += own_cost.clock() - entered
    elif _PRE_HOOK and clock.optimizer_marks:
        _backward_unneeded()


def _backward_unneeded() -> None:
    """An optimizer marks steps: a backward never will again, so its wrappers and the pre-step
    hook that tells a backward inside ``optimizer.step()`` apart go (each is a call more in
    every step: a few microseconds with the caches cold, between a step's tensor ops)."""
    while _PRE_HOOK:
        _PRE_HOOK.pop().remove()
    _BACKWARD.uninstall()


class _BackwardMarks:
    """The wrappers of ``Tensor.backward`` and ``torch.autograd.backward``: each marks when the
    backward pass has returned. ``Tensor.backward`` marks after its whole call, outside any torch
    function mode's handler (a recorder's mode must be able to leave at a step boundary);
    ``torch.autograd.backward`` marks only when called directly (``depth``: inside
    ``Tensor.backward``, which calls it)."""

    def __init__(self) -> None:
        self.depth = 0
        self.originals: list[tuple[Any, str, Any, Any]] = []  # owner, name, original, wrapper

    def install(self) -> None:
        import torch
        import torch.autograd

        if self.originals:
            return
        owners: tuple[tuple[Any, Any], ...] = (
            (torch.Tensor, self._tensor),
            (torch.autograd, self._autograd),
        )
        for owner, wrap in owners:
            original = owner.backward
            wrapper = wrap(original)
            wrapper.__wrapped__ = original
            wrapper.__doc__ = original.__doc__
            self.originals.append((owner, "backward", original, wrapper))
            setattr(owner, "backward", wrapper)  # noqa: B010 (owner is Any: a class or module)

    def uninstall(self) -> None:
        """The originals back, where the wrapper is still what the name holds (a wrapper the
        script put over it since stays, with this one, now inert, beneath)."""
        while self.originals:
            owner, attr, original, wrapper = self.originals.pop()
            if getattr(owner, attr, None) is wrapper:
                setattr(owner, attr, original)

    def _tensor(self, original: Any) -> Any:
        def backward(*args: Any, **kwargs: Any) -> Any:
            self.depth += 1
            try:
                out = original(*args, **kwargs)
            finally:
                self.depth -= 1
            if _ACTIVE is not None and self.depth == 0:
                _ACTIVE.mark(BACKWARD)
            return out

        return backward

    def _autograd(self, original: Any) -> Any:
        def backward(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            if _ACTIVE is not None and self.depth == 0:
                _ACTIVE.mark(BACKWARD)
            return out

        return backward


_BACKWARD = _BackwardMarks()


def install(clock: StepClock) -> None:
    """Make ``clock`` the active one, hook every optimizer's ``step()`` and wrap the backward
    entry points (``Tensor.backward``, ``torch.autograd.backward``)."""
    global _ACTIVE
    _ACTIVE = clock
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    if not _HOOK_HANDLES:
        _HOOK_HANDLES.append(register_optimizer_step_post_hook(_optimizer_post_hook))
    if not _PRE_HOOK:  # a clock before this one may have seen an optimizer mark
        _PRE_HOOK.append(register_optimizer_step_pre_hook(_optimizer_pre_hook))
    _BACKWARD.install()


def uninstall() -> None:
    global _ACTIVE
    _ACTIVE = None
    while _HOOK_HANDLES:
        _HOOK_HANDLES.pop().remove()
    while _PRE_HOOK:
        _PRE_HOOK.pop().remove()
    _BACKWARD.uninstall()
