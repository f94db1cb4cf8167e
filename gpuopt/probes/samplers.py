"""Background utilization sampling: CPU and RSS of the process tree (``/proc`` on Linux, else
psutil), GPUs (NVML).

One daemon thread calls :meth:`UtilizationSampler.tick` every ``interval`` seconds. ``tick`` is
also what tests call directly, with a fake clock and a fake NVML backend, so the numbers the
sampler reports are testable without a GPU or real time.

CPU utilization is the process tree's CPU time (the script and its DataLoader workers) as a
percentage of all the cores the process may use (0–100), like a system monitor; ``cores_busy``
gives the same as a number of cores.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from gpuopt.debug import logger
from gpuopt.defaults import SAMPLE_INTERVAL_S
from gpuopt.model.profile import (
    CpuUtilization,
    GpuSampleSummary,
    MeanMax,
    Timeline,
    Utilization,
)
from gpuopt.probes import contention, proc_tree
from gpuopt.probes.accelerator import GpuSample, NvmlBackend
from gpuopt.probes.own_cost import ThreadTime
from gpuopt.probes.protocol import RunContext

log = logger(__name__)

_CHILD_REFRESH_S = 1.0


class ProcessTreeCpu:
    """CPU% and RSS of a process and all its descendants (DataLoader workers included), through
    psutil: the reader where Linux's ``/proc`` files are missing (:func:`tree_cpu`)."""

    def __init__(self, pid: int | None = None) -> None:
        import psutil

        self._psutil = psutil
        self.root = psutil.Process(pid or os.getpid())
        self._procs: dict[int, Any] = {self.root.pid: self.root}
        self._last_refresh = -1e9
        self.root.cpu_percent(None)  # prime: the first call always returns 0
        psutil.cpu_percent(None)  # the machine's, primed alike

    def machine_percent(self) -> float:
        """CPU percent of the whole machine since the last call, in units of one core = 100."""
        return float(self._psutil.cpu_percent(None)) * (os.cpu_count() or 1)

    def _descendants(self) -> list[Any]:
        """The root's descendants, by psutil's scan of every process on the machine (1.7 ms with
        64 processes here, growing with their count); where Linux has per-thread ``children``
        files, :class:`gpuopt.probes.proc_tree.ProcTreeCpu` reads those instead."""
        return list(self.root.children(recursive=True))

    def pids(self) -> set[int]:
        return set(self._procs)

    def read(self, now: float) -> tuple[float, int]:
        """(CPU percent summed over the tree, in units of one core = 100; RSS bytes summed)."""
        ps = self._psutil
        if now - self._last_refresh >= _CHILD_REFRESH_S:
            self._last_refresh = now
            try:
                for child in self._descendants():
                    if child.pid not in self._procs:
                        self._procs[child.pid] = child
                        try:
                            child.cpu_percent(None)
                        except ps.Error as exc:
                            log.debug_once("a child's CPU time not read: %s", exc)
            except ps.Error as exc:
                log.debug_once("the process tree not read: %s", exc)
        cpu = 0.0
        rss = 0
        for pid, proc in list(self._procs.items()):
            try:
                with proc.oneshot():
                    cpu += proc.cpu_percent(None)
                    rss += proc.memory_info().rss
            except ps.Error as exc:
                log.debug("process %d no longer sampled: %s", pid, exc)
                del self._procs[pid]
        return cpu, rss


class UtilizationSampler:
    """Samples CPU/RSS and, when a backend is given, every GPU; keeps a timeline."""

    name = "sampler"
    steps_wanted = False  # on_step does nothing

    def __init__(
        self,
        interval: float = SAMPLE_INTERVAL_S,
        nvml: NvmlBackend | None = None,
        nvml_note: str | None = None,
        cpu: Any = None,
        clock: Callable[[], float] = time.perf_counter,
        ncpu: int | None = None,
    ) -> None:
        self.interval = interval
        self.nvml = nvml
        self.nvml_note = nvml_note
        self._cpu = cpu
        self._clock = clock
        self.ncpu = ncpu or _usable_cpus()
        self.t0: float | None = None
        self.t: list[float] = []
        self.cpu_pct: list[float] = []
        self.other_cores: list[float] = []  # busy cores of other processes, per sample
        self.rss: list[int] = []
        self.gpu: list[list[GpuSample]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        # called from the sampling thread after every tick (the session's checkpoints)
        self.after_tick: Callable[[], None] | None = None
        self.sched0: contention.Snapshot | None = None  # the threads' run delay at start
        self.cpu_time = ThreadTime()  # the sampling thread's own CPU seconds

    # -- Probe interface -------------------------------------------------------------------
    def start(self, ctx: RunContext | None = None, thread: bool = True) -> None:
        if self._cpu is None:
            self._cpu = tree_cpu()
        self.t0 = self._clock()
        self.sched0 = contention.snapshot()
        if thread:
            self._thread = threading.Thread(target=self._run, name="gpuopt-sampler", daemon=True)
            self._thread.start()

    def on_step(self, index: int, t: float) -> None:
        pass

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None
            if not self.t and self.error is None:
                self._last_sample()
        if self.nvml is not None:
            self.nvml.close()

    def result(self) -> Utilization:
        """The profile's ``utilization``: CPU over the process tree, GPUs where NVML sampled."""
        cpu = self.cpu_pct
        util = Utilization(
            samples=len(self.t),
            interval_s=self.interval,
            cpu=CpuUtilization(
                mean=_mean(cpu),
                max=max(cpu) if cpu else None,
                cores_busy_mean=_mean([c * self.ncpu / 100 for c in cpu]),
                other_cores_busy_mean=_rounded(_mean(self.other_cores)),
            ),
            cpu_count=self.ncpu,
        )
        self._run_delay(util.cpu)
        gpu_series: list[float | None] | None = None
        mem_series: list[int | None] | None = None
        if self.nvml is not None and self.gpu:
            # Mean over GPUs of this process's GPUs would need the device map; report each GPU and
            # the mean over all sampled GPUs for the timeline.
            gpu_series = [
                _mean([g.util_pct for g in row if g.util_pct is not None]) for row in self.gpu
            ]
            mem_series = [_sum_or_none([g.memory_used_bytes for g in row]) for row in self.gpu]
            vals = [v for v in gpu_series if v is not None]
            util.gpu = MeanMax(mean=_mean(vals), max=max(vals) if vals else None)
            util.gpus = [self._gpu_summary(i) for i in range(len(self.gpu[0]))]
        elif self.nvml_note:
            util.note = self.nvml_note
        util.timeline = Timeline(
            t_s=[round(x, 4) for x in self.t],
            cpu=[round(x, 2) for x in cpu],
            gpu=gpu_series,
            rss_bytes=self.rss,
            gpu_memory_bytes=mem_series,
        )
        return util

    def _run_delay(self, cpu: CpuUtilization) -> None:
        """The threads' wait for a core since start (gpuopt.probes.contention), where measured."""
        now = contention.snapshot() if self.sched0 is not None else None
        if self.sched0 is None or now is None or self.t0 is None:
            return
        wall = self._clock() - self.t0
        d = contention.delta(self.sched0, now)
        cpu.run_delay_share = round(d.share, 4)
        cpu.run_delay_cores = round(d.wait_s / wall, 3) if wall > 0 else 0.0

    def _gpu_summary(self, i: int) -> GpuSampleSummary:
        rows = [row[i] for row in self.gpu]
        return GpuSampleSummary(
            index=i,
            util_mean=_mean([g.util_pct for g in rows if g.util_pct is not None]),
            memory_used_max_bytes=max((g.memory_used_bytes or 0) for g in rows),
            power_w_mean=_mean([g.power_w for g in rows if g.power_w is not None]),
            sm_clock_mhz_mean=_mean([g.sm_clock_mhz for g in rows if g.sm_clock_mhz is not None]),
            process_util_mean=_mean(
                [g.process_util_pct for g in rows if g.process_util_pct is not None]
            ),
        )

    # -- sampling --------------------------------------------------------------------------
    def tick(self) -> None:
        now = self._clock()
        t0 = self.t0 if self.t0 is not None else now
        cpu, rss = self._cpu.read(now)
        machine = getattr(self._cpu, "machine_percent", None)
        if machine is not None:
            self.other_cores.append(max(machine() - cpu, 0.0) / 100)
        row: list[GpuSample] = []
        if self.nvml is not None:
            pids = self._cpu.pids()
            row = [self.nvml.sample(i, pids) for i in range(self.nvml.device_count())]
        self.t.append(now - t0)
        self.cpu_pct.append(min(100.0, cpu / self.ncpu))
        self.rss.append(rss)
        if self.nvml is not None:
            self.gpu.append(row)

    def _last_sample(self) -> None:
        """A run shorter than one interval still gets one sample: its whole length (CPU since
        start, as psutil measures it between two reads)."""
        try:
            self.tick()
        except Exception as exc:
            self.error = f"utilization sampler stopped: {type(exc).__name__}: {exc}"
            log.debug("probe sampler: gave up", exc_info=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except Exception as exc:  # sampling must never take the run down
                self.error = f"utilization sampler stopped: {type(exc).__name__}: {exc}"
                log.debug("probe sampler: gave up", exc_info=True)
                return
            if self.after_tick is not None:
                self.after_tick()
            self.cpu_time.read()

    def latest(self) -> tuple[float | None, float | None]:
        """(CPU %, GPU %) of the last sample, for the live progress line."""
        cpu = self.cpu_pct[-1] if self.cpu_pct else None
        gpu = None
        if self.gpu and self.gpu[-1]:
            vals = [g.util_pct for g in self.gpu[-1] if g.util_pct is not None]
            gpu = _mean(vals)
        return cpu, gpu


def tree_cpu() -> proc_tree.ProcTreeCpu | ProcessTreeCpu:
    """The reader of the process tree's CPU and RSS: Linux's ``/proc`` where it has the files
    (:mod:`gpuopt.probes.proc_tree`: no psutil import before the script starts), else psutil."""
    if proc_tree.available():
        return proc_tree.ProcTreeCpu()
    return ProcessTreeCpu()


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _mean(xs: list[Any]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _rounded(x: float | None) -> float | None:
    return round(x, 3) if x is not None else None


def _sum_or_none(xs: list[int | None]) -> int | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) if vals else None
