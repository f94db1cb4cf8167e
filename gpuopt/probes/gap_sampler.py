"""Where the recorder's window spends its time *outside* tensor ops: a stack sampler.

The recorder measures every stretch between two model ops exactly (``StepCounters.gaps``), but
not what ran in it. A stretch far longer than issuing an op takes is no op dispatch: a
``time.sleep``, a blocking read, a Python loop that issues no tensor op. To name its line, this
sampler looks at the training thread's Python stack every :data:`INTERVAL_S` while the recorder's
window is on (its steps are left out of the run's statistics), and keeps a sample only when the
thread is in such a stretch: in no op and in no recorder code, at least
:data:`~gpuopt.probes.recorder_counters.GAP_FLOOR_S` after the last op ended. Each sample weighs
the time since the sampler's previous look (at most the stretch's age), and carries when its
stretch began (``since``): where the recorder measured that stretch (``StepCounters.gaps``),
the assembly names it for its whole length, which looks every millisecond undercount (by the
samples alone a 1.7 ms sleep is named for a third of it).

Samples keep the stack as ``(id(code), lasti)`` pairs, innermost first (the sampler keeps the code
objects alive in ``codes``; a stack seen again is the same tuple, so a long sleep's thousands of
samples share one); nothing is resolved here, in the sampling thread:
:mod:`gpuopt.assemble.host_summary` finds the user's line and the innermost frame once the run is
over. A C call (``time.sleep``, ``file.read``) has no Python frame of its own: its innermost frame
is the line that called it.

The sampler needs the GIL to look (``sys._current_frames``): while the training thread sleeps or
reads it gets it at once; while the thread runs Python it waits up to the interpreter's switch
interval (5 ms), so pure-Python stretches are seen about every 5 ms, each sample weighing that
long.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from types import CodeType
from typing import Any

from msgspec import Struct

from gpuopt.debug import logger
from gpuopt.probes.recorder_counters import GAP_FLOOR_S

log = logger(__name__)

INTERVAL_S = 1e-3
MAX_DEPTH = 48  # frames kept per sample, innermost first
MAX_SAMPLES = 20_000  # a window of very long steps stops adding samples here

Stack = tuple[tuple[int, int], ...]  # (id(code), lasti), innermost first


class GapSample(Struct, frozen=True):
    """One look at the training thread in a stretch without tensor ops."""

    step: int  # the window step it fell in (0 = the window's first)
    seconds: float  # the time it stands for
    age: float  # seconds since the last op ended, when it was taken
    stack: Stack  # (id(code), lasti), innermost first: codes in GapSampler.codes
    since: float = 0.0  # when the stretch began (the engine's last_exit): the stretch's key


class GapSampler:
    """Samples ``thread_id``'s stack while ``engine`` records, outside its ops (see the module).

    ``engine`` is the recorder's :class:`~gpuopt.probes.recorder_engine.RecorderEngine`: the
    sampler reads its ``recording``, ``busy``, ``last_exit`` and ``steps_done``, never writes.
    ``skip`` are the ids of the code objects of the recorder's handlers (ids: hashing a code
    object hashes its bytecode): a stack holding one is in an op (or in the recorder) and is not
    sampled.
    """

    def __init__(
        self,
        engine: Any,
        skip: frozenset[int],
        interval_s: float = INTERVAL_S,
        python: bool = False,
    ):
        self.engine = engine
        self.skip = skip
        self.interval_s = interval_s
        self.samples: list[GapSample] = []
        self.codes: dict[int, CodeType] = {}  # every code object a stack refers to
        self._stacks: dict[Stack, Stack] = {}  # each distinct stack once
        self.errors: list[str] = []
        # ``python`` (gpuopt.probes.framework_python): every look, in an op or not, by stack,
        # weighing the CPU time the sampled thread used since the previous look (its thread CPU
        # clock): whose code a step's CPU time is (gpuopt.frameworks.frames); no gap samples
        self.python_too = python
        # python: each wait drawn from [interval/2, 3 interval/2] (its own generator, a fixed
        # seed): looks at a fixed period alias with steps of about its multiple (a look every
        # 1 ms on 2 ms steps lands at the same places of each step, a framework share of 0.00
        # to 0.27 run to run on one Lightning loop)
        self._jitter = random.Random(0) if python else None
        self.python: dict[Stack, float] = {}
        self.cpu_total = 0.0  # the sampled thread's CPU seconds over the looks
        self._cpu_clock: int | None = None
        self._cpu_last = 0.0
        self._go = threading.Event()  # cleared: paused (no look, no wake-up) until resumed
        self._go.set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._tid = 0
        self._first_step = 0

    def start(self) -> None:
        """Sample the calling thread from now on (the thread that runs the training steps)."""
        if self._thread is not None:
            return
        self._tid = threading.get_ident()
        self._first_step = int(self.engine.steps_done)
        clock_of = getattr(time, "pthread_getcpuclockid", None)  # not on every platform
        if self.python_too and clock_of is not None:
            self._cpu_clock = clock_of(self._tid)
            self._cpu_last = time.clock_gettime(self._cpu_clock)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpuopt-gap-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        thread = self._thread
        if thread is None:
            return
        self._stop.set()
        self._go.set()
        if thread is not threading.current_thread():
            thread.join(timeout=1.0)
        self._thread = None

    def _next_wait(self) -> float:
        if self._jitter is None:
            return self.interval_s
        return self.interval_s * (0.5 + self._jitter.random())

    def _run(self) -> None:
        last = time.perf_counter()
        try:
            while not self._stop.wait(self._next_wait()):
                if not self._go.is_set():  # paused: the thread's CPU meanwhile is no look's
                    self._go.wait()
                    if self._cpu_clock is not None:
                        self._cpu_last = time.clock_gettime(self._cpu_clock)
                    last = time.perf_counter()
                    continue
                now = time.perf_counter()
                self.look(now, last)
                last = now
                if len(self.samples) >= MAX_SAMPLES:
                    return
        except Exception as exc:  # never disturb the run: stop sampling and say why
            log.debug("gap sampler: gave up", exc_info=True)
            self.errors.append(f"gap sampler stopped: {type(exc).__name__}: {exc}")

    def look(self, now: float, last: float) -> GapSample | None:
        """One look at the thread (``last``: the previous look's time); the sample kept, if any."""
        engine = self.engine
        if not engine.recording:
            return None
        cpu = self._cpu_since()
        if engine.busy:
            return None
        since = engine.last_exit
        age = now - since
        if age < GAP_FLOOR_S and not self.python_too:
            return None
        frame = sys._current_frames().get(self._tid)
        stack: list[tuple[int, int]] = []
        skip, codes = self.skip, self.codes
        f = frame
        while f is not None:
            code = f.f_code
            cid = id(code)
            if cid in skip:
                return None  # in an op, or in the recorder's own code
            if len(stack) < MAX_DEPTH:
                stack.append((cid, f.f_lasti))
                if cid not in codes:
                    codes[cid] = code
            f = f.f_back
        if not stack:
            return None
        key = self._stacks.setdefault(tuple(stack), tuple(stack))
        if self.python_too:
            self.python[key] = self.python.get(key, 0.0) + cpu
            return None
        if age < GAP_FLOOR_S:
            return None
        sample = GapSample(
            step=int(engine.steps_done) - self._first_step,
            seconds=min(now - last, age),
            age=age,
            stack=key,
            since=since,
        )
        self.samples.append(sample)
        return sample

    def pause(self) -> None:
        """No looks until :meth:`resume` (the thread blocks: no wake-ups in between)."""
        self._go.clear()

    def resume(self) -> None:
        self._go.set()

    def _cpu_since(self) -> float:
        """The sampled thread's CPU seconds since the last look, with ``python`` (one per look
        where the platform has no thread CPU clock); else 0."""
        if not self.python_too:
            return 0.0
        if self._cpu_clock is None:
            self.cpu_total += 1.0
            return 1.0
        now = time.clock_gettime(self._cpu_clock)
        spent, self._cpu_last = max(now - self._cpu_last, 0.0), now
        self.cpu_total += spent
        return spent


def recorder_codes(*owners: Any) -> frozenset[int]:
    """The ids of the code objects of ``owners``' functions and of the functions nested in them
    (the ``synchronize`` wrapper the engine makes): a stack holding one is the recorder's."""
    out: set[int] = set()
    todo: list[Any] = []
    for owner in owners:
        for value in vars(owner).values():
            fn = getattr(value, "__func__", value)
            code = getattr(fn, "__code__", None)
            if code is not None:
                todo.append(code)
    while todo:
        code = todo.pop()
        if id(code) in out:
            continue
        out.add(id(code))
        todo += [c for c in code.co_consts if isinstance(c, CodeType)]
    return frozenset(out)
