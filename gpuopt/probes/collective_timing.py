"""How one collective's time is taken: on the host, or from NCCL's own GPU timing.

* :class:`HostTimer` (gloo and every CPU backend): the call's launch time, the time the caller
  was blocked (in the call, or later in ``work.wait()``), and the completion time from a callback
  on the work's future. On a CPU backend the collective runs on the host, so these are the
  collective's real times.
* :class:`NcclTimer` (NCCL; GPU-only, not measured here): NCCL enqueues the collective on a CUDA
  stream and returns at once, so host times say nothing. With ``TORCH_NCCL_ENABLE_TIMING=1``
  (the torchrun launcher sets it for the ranks) each work records CUDA events around its kernel
  and ``work._get_duration()`` gives the kernel's time in ms once it completed; the timer reads it
  at each step boundary for the works that have completed by then.

Both hold no tensor and only duck-typed works and futures, so tests drive them with fakes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from msgspec import Struct

from gpuopt import torch_compat
from gpuopt.debug import logger

log = logger(__name__)

HOST = "host"
NCCL_WORK = "nccl-work"
# works still pending after this many step boundaries are dropped (never waited, never done)
NCCL_PENDING_STEPS = 64


class Timed(Struct):
    """One collective call's times: clock seconds, except ``device_s`` (the GPU's own)."""

    t_launch: float
    t_done: float | None = None
    blocked_s: float = 0.0
    device_s: float | None = None

    @property
    def span_s(self) -> float | None:
        """Launch to completion: the device's time where it measured one, else the host's."""
        if self.device_s is not None:
            return self.device_s
        if self.t_done is None:
            return None
        return max(self.t_done - self.t_launch, 0.0)


class WorkTimer(Protocol):
    """What the collectives probe asks of a timer."""

    source: str

    def track(self, work: Any, timed: Timed, on_done: Callable[[Timed], None]) -> None:
        """Arrange for ``timed`` to learn when ``work`` (a c10d Work or a torch Future)
        completed; ``on_done(timed)`` is called once it knows."""

    def settle(self) -> None:
        """At a step boundary: collect what completed since the last one."""


class HostTimer:
    """Completion on the host: a callback on the work's future records the clock."""

    source = HOST

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock

    def track(self, work: Any, timed: Timed, on_done: Callable[[Timed], None]) -> None:
        get_future = getattr(work, "get_future", None)
        try:
            fut = get_future() if callable(get_future) else work
            clock = self.clock

            def done(_: Any) -> None:
                timed.t_done = clock()
                on_done(timed)

            fut.add_done_callback(done)
        except Exception as exc:  # a backend without futures: the call's own time is all there is
            log.debug_once("collective without a future (its call's time is all): %s", exc)

    def settle(self) -> None:
        pass


class NcclTimer:
    """Completion from NCCL's CUDA-event timing of each work (``work._get_duration()``, ms)."""

    source = NCCL_WORK

    def __init__(self) -> None:
        self.pending: list[tuple[Any, Timed, Callable[[Timed], None], int]] = []
        self.boundaries = 0
        self.unavailable = 0  # works whose duration NCCL could not give (timing off)

    def track(self, work: Any, timed: Timed, on_done: Callable[[Timed], None]) -> None:
        if torch_compat.has_work_duration(work):
            self.pending.append((work, timed, on_done, self.boundaries))

    def settle(self) -> None:
        self.boundaries += 1
        still: list[tuple[Any, Timed, Callable[[Timed], None], int]] = []
        for work, timed, on_done, since in self.pending:
            try:
                completed = bool(work.is_completed())
            except Exception as exc:
                log.debug_once("work.is_completed() failed: %s", exc)
                completed = False
            if not completed:
                if self.boundaries - since < NCCL_PENDING_STEPS:
                    still.append((work, timed, on_done, since))
                continue
            try:
                ms = torch_compat.work_duration_ms(work)
            except Exception as exc:  # TORCH_NCCL_ENABLE_TIMING was not on when the group was made
                log.debug_once("NCCL's duration not read: %s", exc)
                self.unavailable += 1
                continue
            timed.device_s = max(ms, 0.0) / 1e3
            on_done(timed)
        self.pending = still


def timer_for(backend: str | None, clock: Callable[[], float] = time.perf_counter) -> WorkTimer:
    """NCCL's GPU timing for an NCCL group, host timing for every other backend."""
    if backend is not None and backend.lower() == "nccl":
        return NcclTimer()
    return HostTimer(clock)
