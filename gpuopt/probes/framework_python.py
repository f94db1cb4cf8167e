"""How much of a step's CPU time a training framework spends in its own code: sampled over
ordinary steps.

On a run that imported a framework (gpuopt.frameworks), once the recorder's window has ended
and :data:`CLEAN` steps more have passed unsampled, the training thread's stack is looked at
every :data:`INTERVAL_S` for :data:`STEPS` steps in a row (fewer where the run ends first): the
clean steps stay in the run's statistics however soon it ends, and the sampled ones, with the
window's, are under half of a 60-step run's. Each look weighs the CPU time the training thread
used since the previous look (its thread CPU clock, read from the sampling thread), and goes to
the innermost frame of its stack that is a framework's, the user's or torch's
(``gpuopt.frameworks.frames``): an op's time to the code that called it. The framework's CPU
time over the thread's is its share
(``gpuopt.assemble.framework_run.python_share``).

Why not the recorder's window, as before: there the recorder's own work on every op took most of
the time (the Lightning autoencoder's 2.6 ms step took 11-25 ms recorded), so its three steps
held 7-23 looks in Python, and with the window's time between ops (calibrated, on a loaded
machine from 0 to 41% of the step) the share read 0.00-0.28 run to run. Here a look costs the
run no recorder, only the wake-up and the GIL handed over and back (50-100 us: looks every
:data:`INTERVAL_S` add about a third to a sampled step), there are a few hundred, and CPU
time leaves out the time the thread waited for a core or for the GIL: a busy machine stretches
the wall clock, not the split. The interpreter hands the GIL over every :data:`SWITCH_S` while
sampling (instead of every 5 ms) so that a look is not held back to the moment the thread enters
an op. The sampling thread's cost falls on these steps: they are instrumented, left out of the
run's statistics, and what they took beyond the median step is the ``overhead`` key's
``windows_s``; before and after them the sampling thread is blocked.
"""

from __future__ import annotations

import sys

from gpuopt.debug import logger
from gpuopt.probes.gap_sampler import GapSampler

log = logger(__name__)

STEPS = 20  # steps sampled at most: under half of a 60-step Lightning run's
CLEAN = 10  # steps after the window before the sampled ones
# between looks (on average: each wait drawn around it): each costs the training thread 50-100 us
# (a wake-up, the GIL handed over and back), +34-38% of a 2 ms step's CPU (pinned, load 5); a
# look every 1 ms costs +4-8% but read a Lightning loop's share 0.04-0.17 where every 0.2 ms
# reads 0.14-0.26 (six runs each, alternated, quiet)
INTERVAL_S = 2e-4
SWITCH_S = 1e-4  # the interpreter's switch interval while sampling (its default: 5 ms)


class _Flag:
    """What the gap sampler reads of the recorder's engine, for steps the recorder does not
    record: looking or not (``recording``), never inside an op (a look's owner is its
    stack's)."""

    recording = False
    busy = False
    last_exit = 0.0
    steps_done = 0


class FrameworkPython:
    """The sampling (see the module doc): :meth:`begin` at a step boundary, :meth:`on_step`
    at each, :meth:`end` at the run's end at the latest. The sampling thread is blocked over
    the ``clean`` steps first, then looks over ``steps`` steps in a row."""

    def __init__(self, steps: int = STEPS, clean: int = CLEAN) -> None:
        self.wanted = steps
        self.clean = clean  # steps still to pass before sampling
        self.sampler: GapSampler | None = None  # kept after the end: its looks are the result
        self.steps: list[int] = []  # the steps sampled (instrumented)
        self.running = False
        self._flag = _Flag()
        self._switch: float | None = None
        self.errors: list[str] = []

    def begin(self) -> None:
        """Sample from now on (called from the training thread, at a step boundary)."""
        try:
            self.sampler = GapSampler(self._flag, frozenset(), INTERVAL_S, python=True)
            self._sampling(self.clean <= 0)  # blocked until the clean steps have passed
            self.sampler.start()
            self.running = True
        except Exception as exc:  # measuring must never break the run
            log.debug("framework python: not sampled", exc_info=True)
            self.errors.append(f"framework CPU share not sampled: {type(exc).__name__}: {exc}")
            self.sampler = None
            self.end()

    def _sampling(self, on: bool) -> None:
        """Look during the next step (the switch interval lowered), or not (restored)."""
        self._flag.recording = on
        if on and self._switch is None:
            self._switch = sys.getswitchinterval()
            sys.setswitchinterval(min(self._switch, SWITCH_S))
        elif not on and self._switch is not None:
            sys.setswitchinterval(self._switch)
            self._switch = None
        if self.sampler is not None:
            (self.sampler.resume if on else self.sampler.pause)()

    def on_step(self, index: int) -> None:
        if not self.running:
            return
        if not self._flag.recording:
            self.clean -= 1
            if self.clean <= 0:
                self._sampling(True)  # the next step is the first sampled
            return
        self.steps.append(index)
        if len(self.steps) >= self.wanted:
            self.end()

    def end(self) -> None:
        """Stop sampling (at the last step sampled, or the run's end); idempotent."""
        self.running = False
        self._sampling(False)
        if self.sampler is not None:
            self.sampler.stop()
            self.errors += [e for e in self.sampler.errors if e not in self.errors]
