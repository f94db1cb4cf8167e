"""Step hook, DataLoader wait and samplers with a fake clock and a fake NVML: exact numbers."""

from __future__ import annotations

import os
import sys

import msgspec
import psutil
import pytest
import torch
from fakes import FakeClock, FakeCpu, FakeNvml
from torch.utils.data import DataLoader, Dataset

from gpuopt.probes import steps as steps_mod
from gpuopt.probes.dataloader import DataLoaderProbe, add_batch_listener, remove_batch_listener
from gpuopt.probes.protocol import RunContext
from gpuopt.probes.samplers import UtilizationSampler


def _ctx(tmp_path) -> RunContext:
    from pathlib import Path

    return RunContext(script="t.py", user_roots=[Path(__file__).resolve().parent], out_dir=tmp_path)


def test_step_clock_counts_first_optimizer_only_and_stops() -> None:
    clock = FakeClock()
    sc = steps_mod.StepClock(clock=clock, max_steps=3)
    seen: list[tuple[int, float]] = []
    sc.listeners.append(lambda i, t: seen.append((i, t)))
    g, d = object(), object()
    sc.mark("optimizer.step", optimizer=g)
    clock.advance(1)
    sc.mark("optimizer.step", optimizer=d)  # second optimizer of the same iteration: not a step
    sc.mark("optimizer.step", optimizer=g)
    clock.advance(1)
    with pytest.raises(steps_mod.StopRun):
        sc.mark("optimizer.step", optimizer=g)
    assert seen == [(0, 100.0), (1, 101.0), (2, 102.0)]
    sc.mark("optimizer.step", optimizer=g)  # after the stop nothing more is counted
    assert sc.count == 3


def test_explicit_gpuopt_step_wins_over_optimizer() -> None:
    sc = steps_mod.StepClock(clock=FakeClock())
    opt = object()
    sc.mark("optimizer.step", optimizer=opt)
    sc.mark("gpuopt.step")
    sc.mark("optimizer.step", optimizer=opt)
    sc.mark("gpuopt.step")
    assert sc.count == 3 and sc.sources == {"optimizer.step", "gpuopt.step"}


def test_global_hook_sees_every_optimizer_class() -> None:
    sc = steps_mod.StepClock(clock=FakeClock())
    steps_mod.install(sc)
    try:
        for cls in (torch.optim.SGD, torch.optim.AdamW):
            p = torch.nn.Parameter(torch.ones(2))
            opt = cls([p], lr=0.1)
            p.grad = torch.ones(2)
            opt.step()
    finally:
        steps_mod.uninstall()
    assert sc.count == 1  # the second optimizer is a different instance: not a new step
    import gpuopt

    gpuopt.step()  # outside a run: a no-op, no error
    assert sc.count == 1


class _Timed(Dataset):
    """Each item advances the fake clock by its cost: the loader's wait is known exactly."""

    def __init__(self, clock: FakeClock, costs: list[float]) -> None:
        self.clock, self.costs = clock, costs

    def __len__(self) -> int:
        return len(self.costs)

    def __getitem__(self, i: int) -> torch.Tensor:
        self.clock.advance(self.costs[i])
        return torch.tensor([float(i)])


def test_dataloader_wait_per_step_exact(tmp_path) -> None:
    clock = FakeClock()
    sc = steps_mod.StepClock(clock=clock)
    probe = DataLoaderProbe(step_count=lambda: sc.count, clock=clock)
    batches: list[torch.Tensor] = []
    add_batch_listener(batches.append)
    probe.start(_ctx(tmp_path))
    try:

        class MyLoader(DataLoader):  # subclasses are measured too
            pass

        loader = MyLoader(_Timed(clock, [0.5, 0.0, 0.25, 1.0]), batch_size=1)
        for _ in loader:
            clock.advance(2.0)  # compute
            sc.mark("gpuopt.step")
    finally:
        probe.stop()
        remove_batch_listener(batches.append)
    assert probe.wait_by_step == {0: 0.5, 1: 0.0, 2: 0.25, 3: 1.0, 4: 0.0}
    assert len(batches) == 4 and float(batches[2]) == 2.0
    (entry,) = msgspec.to_builtins(probe.result().infos([1, 2, 3]))
    assert entry["class"] == "MyLoader" and entry["dataset"] == "_Timed"
    assert entry["batches"] == 4 and entry["wait_s_total"] == pytest.approx(1.75)
    assert entry["wait_s_per_step"] == pytest.approx((0.0 + 0.25 + 1.0) / 3)
    assert entry["site"].endswith("test_probes_foundation.py:" + str(_line_of("for _ in loader:")))
    from torch.utils.data import dataloader as dl

    assert not hasattr(dl._BaseDataLoaderIter.__next__, "__wrapped__")  # restored


def _line_of(text: str) -> int:
    import inspect

    src = inspect.getsource(test_dataloader_wait_per_step_exact).splitlines()
    start = test_dataloader_wait_per_step_exact.__code__.co_firstlineno
    return start + next(i for i, ln in enumerate(src) if text in ln)


def test_sampler_with_fake_nvml_and_cpu(tmp_path) -> None:
    clock = FakeClock(0.0)
    nv = FakeNvml(["Fake H100", "Fake H100"], [[10.0, 50.0, 90.0], [30.0, 30.0, 30.0]])
    cpu = FakeCpu([(50.0, 100), (150.0, 200), (200.0, 300)])
    s = UtilizationSampler(interval=0.5, nvml=nv, cpu=cpu, clock=clock, ncpu=2)
    s.start(thread=False)
    for _ in range(3):
        clock.advance(0.5)
        s.tick()
    s.stop()
    u = msgspec.to_builtins(s.result())
    assert u["samples"] == 3
    assert u["cpu"]["mean"] == pytest.approx((25 + 75 + 100) / 3) and u["cpu"]["max"] == 100
    assert u["gpu"]["mean"] == pytest.approx((20 + 40 + 60) / 3) and u["gpu"]["max"] == 60
    assert u["timeline"]["t_s"] == [0.5, 1.0, 1.5]
    assert u["timeline"]["gpu"] == [20.0, 40.0, 60.0]
    assert u["gpus"][0]["util_mean"] == pytest.approx(50.0)
    assert nv.closed


def test_sampler_without_gpu_says_why(tmp_path) -> None:
    s = UtilizationSampler(
        interval=0.01, nvml=None, nvml_note="no NVIDIA GPU/NVML: GPU utilization not measured"
    )
    s.start()
    import time

    deadline = time.monotonic() + 60  # however busy the machine: wait for two samples
    while len(s.t) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    s.stop()
    u = s.result()
    assert u.gpu is None and "not measured" in (u.note or "") and u.samples >= 2
    assert u.cpu.mean is not None and 0 <= u.cpu.mean <= 100
    assert u.timeline is not None and min(u.timeline.rss_bytes) > 10 * 2**20


def test_a_run_shorter_than_one_interval_gets_one_sample() -> None:
    """A script that ends before the first tick (regression/main.py of pytorch/examples trains
    in ~0.2 s) still has its CPU measured: one sample at stop, over its whole length."""
    clock = FakeClock(0.0)
    s = UtilizationSampler(interval=3600.0, nvml=None, cpu=FakeCpu([(150.0, 100)]), clock=clock)
    s.start()
    clock.advance(0.2)
    s.stop()
    u = msgspec.to_builtins(s.result())
    assert u["samples"] == 1 and u["timeline"]["t_s"] == [0.2]
    assert u["cpu"]["mean"] == pytest.approx(150.0 / s.ncpu)


def test_live_line_shows_steps_step_time_wait_and_utilization() -> None:
    import io

    from gpuopt.runner.progress import LiveLine

    clock = FakeClock(0.0)
    sc = steps_mod.StepClock(clock=clock)

    class _Loader:
        wait_by_step = {i: 0.010 for i in range(20)}

    class _Sampler:
        def latest(self):
            return 42.0, 87.0

    class _Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = _Tty()
    line = LiveLine.maybe(sc, _Loader(), _Sampler(), stream=stream)
    assert line is not None
    assert (
        LiveLine.maybe(sc, _Loader(), _Sampler(), stream=io.StringIO()) is None
    )  # not a terminal: silent
    for _ in range(12):
        clock.advance(0.040)
        sc.mark("gpuopt.step")
    assert line.text(11) == "gpuopt: step 12 · 40.0 ms/step · data wait 25% · GPU 87% · CPU 42%"
    line.on_step(11, clock())
    line.close()
    assert stream.getvalue().startswith("\r\x1b[Kgpuopt: step 12") and stream.getvalue().endswith(
        "\r\x1b[K"
    )


def test_no_nvidia_device_node_means_no_pynvml_import(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuopt.probes import accelerator

    monkeypatch.setattr(accelerator.sys, "platform", "linux")
    monkeypatch.setattr(accelerator.os.path, "exists", lambda p: False)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # importing it now would raise ImportError
    backend, reason = accelerator.open_nvml()
    assert backend is None and reason is not None and "/dev/nvidiactl absent" in reason
    monkeypatch.setattr(accelerator.os.path, "exists", lambda p: p == "/dev/nvidiactl")
    backend, reason = accelerator.open_nvml()  # a driver node: NVML is asked (here: not installed)
    assert backend is None and reason is not None and "nvidia-ml-py is not installed" in reason


@pytest.mark.parametrize("reader", ["proc", "psutil"])
def test_process_tree_finds_children_and_grandchildren(reader: str) -> None:
    """DataLoader workers and what they start count in the CPU/RSS of the run: both readers
    (Linux's /proc files, psutil where those are missing) find them."""
    import subprocess
    import time

    from gpuopt.probes import proc_tree
    from gpuopt.probes.samplers import ProcessTreeCpu

    code = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)"
    )
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        if reader == "proc" and not proc_tree.available():
            pytest.skip("no /proc/PID/task/TID/children on this system")
        tree: proc_tree.ProcTreeCpu | ProcessTreeCpu = (
            proc_tree.ProcTreeCpu() if reader == "proc" else ProcessTreeCpu()
        )
        deadline = time.monotonic() + 20
        want: set[int] = set()
        while time.monotonic() < deadline:
            want = {child.pid} | {p.pid for p in psutil.Process(child.pid).children()}
            tree._last_refresh = -1e9  # refresh on every read
            tree.read(time.perf_counter())
            if len(want) == 2 and want <= tree.pids():
                break
            time.sleep(0.05)
        assert (
            len(want) == 2 and want <= tree.pids()
        )  # (other children of this process may count too)
    finally:
        for p in __import__("psutil").Process(child.pid).children():
            p.kill()
        child.kill()
        child.wait()


def test_the_proc_reader_finds_the_tree_and_reads_what_psutil_reads() -> None:
    """Linux's /proc read directly (no psutil before the script starts): the same children and
    grandchildren, the same RSS, a busy child's CPU counted, the machine's busy cores."""
    import subprocess
    import time

    from gpuopt.probes import proc_tree
    from gpuopt.probes.samplers import tree_cpu

    if not proc_tree.available():
        pytest.skip("no /proc/PID/task/TID/children on this system")
    assert isinstance(tree_cpu(), proc_tree.ProcTreeCpu)
    code = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'while True: pass']); time.sleep(30)"
    )
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        tree = proc_tree.ProcTreeCpu()
        deadline = time.monotonic() + 20
        want: set[int] = set()
        while time.monotonic() < deadline:
            want = {child.pid} | {p.pid for p in psutil.Process(child.pid).children()}
            tree._last_refresh = -1e9  # look for new descendants on every read
            tree.read(time.perf_counter())
            if len(want) == 2 and want <= tree.pids():
                break
            time.sleep(0.05)
        assert len(want) == 2 and want <= tree.pids()
        time.sleep(0.3)  # the spinning grandchild runs meanwhile
        cpu, rss = tree.read(time.perf_counter())
        assert cpu > 10  # one core spinning somewhere in the tree (one core = 100)
        mine = psutil.Process().memory_info().rss
        assert rss > mine and tree._stat(os.getpid()) == (
            pytest.approx(sum(psutil.Process().cpu_times()[:2]), abs=0.05),
            pytest.approx(mine, rel=0.1),
        )
        assert 0.0 < tree.machine_percent() <= 100.0 * (os.cpu_count() or 1)
    finally:
        for p in psutil.Process(child.pid).children():
            p.kill()
        child.kill()
        child.wait()
    tree.read(time.perf_counter() + 2)  # the child reaped: no longer read
    assert child.pid not in tree.pids()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="elsewhere Python's own name")
def test_the_environment_runs_no_process_and_names_the_platform_as_python() -> None:
    # a fresh interpreter: Python caches the processor it reads with `uname -p` once read
    code = (
        "import sys\n"
        "seen = []\n"
        "sys.addaudithook(lambda ev, a: seen.append(ev) if ev.startswith(('subprocess', 'os.fork',"
        " 'os.posix_spawn', 'os.exec', 'os.system')) else None)\n"
        "from gpuopt.probes.environment import environment\n"
        "name = environment().platform\n"
        "print(seen)\n"
        "import platform\n"
        "print(name == platform.platform(terse=True))\n"
    )
    import subprocess

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.split("\n")[:2] == ["[]", "True"], r.stdout + r.stderr
