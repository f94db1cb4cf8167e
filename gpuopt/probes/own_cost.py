"""What gpuopt itself costs a run, measured where it is spent (the document's ``overhead``).

On the training thread, around gpuopt's code at each step (the DataLoader wrapper's own part and
its batch listeners, the step clock's listeners): the wrapper adds its seconds to :data:`spent`,
and the step clock appends each step's sum, with its listeners' time, to :data:`step_costs`
(written in place, not through functions: a call more per step costs every step). Two
``perf_counter`` reads a place (~0.1 µs). The sampling threads time themselves
(:class:`ThreadTime`: their CPU seconds, read on their own thread). The start (gpuopt's code
before the script's first line, torch's own import left out: the script pays it without gpuopt
too), the windows (from the steps' times) and the end are measured by the session and the
command.
"""

from __future__ import annotations

import time

from msgspec import Struct, field

clock = time.perf_counter
spent = 0.0  # seconds of gpuopt's code in the running step so far
step_costs: list[float] = []  # per ended step: gpuopt's seconds on the training thread


def reset() -> None:
    """A new run in this process (tests run several)."""
    global spent
    spent = 0.0
    step_costs.clear()


class Spent(Struct):
    """A run's own costs as the session measured them (the assembly makes ``overhead`` of it)."""

    start_s: float  # gpuopt's code before the script's first line, torch's import left out
    step_costs: list[float]  # per ended step: gpuopt's seconds on the training thread
    threads_s: float  # the sampling threads' CPU seconds
    # steps gpuopt recorded that the statistics keep (the recorder's last warm-up step, recorded
    # in case the window never comes): their time beyond the median is a window's cost
    recorded: list[int] = field(default_factory=list)


class ThreadTime:
    """A sampling thread's CPU seconds, read by the thread itself after each of its looks."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def read(self) -> None:
        self.seconds = time.thread_time()
