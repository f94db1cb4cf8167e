"""``framework.python_share`` on a CPU-time basis (gpuopt.probes.framework_python): each look at
the training thread weighs the CPU time the thread used since the previous one, so a thread's
waits (a sleep, a core or the GIL another thread holds) weigh nothing; the steps sampled are
counted and left out of the run's statistics, in a row after the clean ones; the switch
interval comes back."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from gpuopt.probes.framework_python import CLEAN, STEPS, SWITCH_S, FrameworkPython
from gpuopt.probes.gap_sampler import GapSampler


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


class _Always:
    recording = True
    busy = False
    last_exit = 0.0
    steps_done = 0


def test_a_looks_weight_is_the_threads_cpu_time_not_the_wall_clock() -> None:
    """A thread that sleeps two thirds of the time and spins the rest: by the wall clock the
    spin would be a third of the looks' time; by the thread's CPU time it is nearly all (a
    look late at a spin's end gives its CPU to the sleep that follows: on a loaded machine the
    sampling thread waits for a core, so the bound leaves room for that)."""
    sampler = GapSampler(_Always(), frozenset(), interval_s=2e-4, python=True)
    ready = threading.Event()

    def work() -> None:
        sampler.start()  # samples the calling thread
        ready.set()
        for _ in range(3):
            _spin(0.04)
            _sleep(0.08)
        sampler.stop()

    switch = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_S)  # as gpuopt.probes.framework_python samples
    try:
        t = threading.Thread(target=work)
        t.start()
        t.join(timeout=30)
    finally:
        sys.setswitchinterval(switch)
    assert ready.is_set() and sampler.cpu_total > 0
    by_function: dict[str, float] = {}
    for stack, cpu in sampler.python.items():
        name = sampler.codes[stack[0][0]].co_name
        by_function[name] = by_function.get(name, 0.0) + cpu
    spun = by_function.get("_spin", 0.0)
    assert spun / sampler.cpu_total > 0.6, by_function
    assert sampler.samples == []  # no gap samples: the recorder's window has its own sampler


def test_steps_in_a_row_after_the_clean_ones_are_sampled_and_the_switch_interval_restored() -> None:
    """The CLEAN steps after the window are not sampled (the interval untouched), then STEPS in
    a row are; the interval comes back at the end."""
    before = sys.getswitchinterval()
    fp = FrameworkPython()
    fp.begin()
    try:
        assert fp.running and sys.getswitchinterval() == before
        for i in range(5, 5 + CLEAN - 1):
            fp.on_step(i)
        assert sys.getswitchinterval() == before and fp.steps == []
        fp.on_step(5 + CLEAN - 1)  # the last clean step: the next one is sampled
        assert abs(sys.getswitchinterval() - min(before, SWITCH_S)) < 1e-9
        for i in range(5 + CLEAN, 5 + CLEAN + STEPS + 3):
            fp.on_step(i)
    finally:
        fp.end()
    assert fp.steps == list(range(5 + CLEAN, 5 + CLEAN + STEPS)) and not fp.running
    assert sys.getswitchinterval() == before
    fp.end()  # idempotent
    assert sys.getswitchinterval() == before


def test_the_share_is_the_frameworks_cpu_over_the_threads(monkeypatch: Any) -> None:
    from types import SimpleNamespace

    from gpuopt.assemble import framework_run

    code = _spin.__code__
    other = _sleep.__code__
    cap = SimpleNamespace(
        python_cpu={((id(code), 0),): 0.03, ((id(other), 0),): 0.07},
        python_codes={id(code): code, id(other): other},
        python_cpu_s=0.1,
        snapshot=SimpleNamespace(resolver=SimpleNamespace(is_user_file=lambda f: False)),
    )
    here = __file__

    def owners(modules: Any, specs: Any) -> list[tuple[str, str]]:
        return []

    monkeypatch.setattr(framework_run, "framework_dirs", owners)
    rec = SimpleNamespace(recorder=cap)
    assert framework_run.python_share(rec, "lightning") == 0.0  # type: ignore[arg-type]
    monkeypatch.setattr(
        framework_run,
        "framework_dirs",
        lambda modules, specs: [(here.rsplit("/", 1)[0] + "/", "lightning")],
    )
    assert framework_run.python_share(rec, "lightning") == 1.0  # type: ignore[arg-type]
    cap.python_cpu_s = 0.2  # CPU time whose looks saw no stack counts in the whole
    assert framework_run.python_share(rec, "lightning") == 0.5  # type: ignore[arg-type]
    cap.python_cpu = {}
    assert framework_run.python_share(rec, "lightning") is None  # type: ignore[arg-type]


def test_a_plain_loop_that_imported_a_framework_is_not_sampled() -> None:
    """Imported is not enough (a test session, a script that uses one of its helpers): the
    step boundary's stack must hold the framework's code."""
    from gpuopt.probes.recorder import _through_framework

    assert not _through_framework(sys._getframe())
