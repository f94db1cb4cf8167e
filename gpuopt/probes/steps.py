"""Step boundaries, found without changing the user's script.

A training step ends at each ``optimizer.step()`` of any ``torch.optim.Optimizer`` (a global
post-hook registered with torch), or at each ``gpuopt.step()`` for loops without an optimizer.
With several optimizers (a GAN's generator and discriminator), only the optimizer that stepped
first marks steps, so one iteration is one step. Once the script calls ``gpuopt.step()`` the
explicit marks win and optimizer steps no longer count.

The clock is injectable (tests pass a fake); the listeners are the runner's probes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

StepListener = Callable[[int, float], None]


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
    _first_optimizer: int | None = None
    _explicit: bool = False
    stopping: bool = False

    def mark(self, source: str = "gpuopt.step", optimizer: Any = None) -> None:
        if self.stopping:
            return
        if source == "gpuopt.step":
            self._explicit = True
        elif self._explicit:
            return
        elif optimizer is not None:
            oid = id(optimizer)
            if self._first_optimizer is None:
                self._first_optimizer = oid
            elif oid != self._first_optimizer:
                return
        t = self.clock()
        index = len(self.ends)
        self.ends.append(t)
        self.sources.add(source)
        for fn in list(self.listeners):
            fn(index, t)
        if self.max_steps is not None and len(self.ends) >= self.max_steps:
            self.stopping = True
            raise StopRun()

    @property
    def count(self) -> int:
        return len(self.ends)


_ACTIVE: StepClock | None = None
_HOOK_HANDLE: Any = None


def active_clock() -> StepClock | None:
    return _ACTIVE


def mark_step(source: str = "gpuopt.step") -> None:
    """``gpuopt.step()``: a no-op outside ``gpuopt profile``."""
    if _ACTIVE is not None:
        _ACTIVE.mark(source)


def _optimizer_post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
    if _ACTIVE is not None:
        _ACTIVE.mark("optimizer.step", optimizer=optimizer)


def install(clock: StepClock) -> None:
    """Make ``clock`` the active one and hook every optimizer's ``step()``."""
    global _ACTIVE, _HOOK_HANDLE
    _ACTIVE = clock
    if _HOOK_HANDLE is None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        _HOOK_HANDLE = register_optimizer_step_post_hook(_optimizer_post_hook)


def uninstall() -> None:
    global _ACTIVE, _HOOK_HANDLE
    _ACTIVE = None
    if _HOOK_HANDLE is not None:
        _HOOK_HANDLE.remove()
        _HOOK_HANDLE = None
