"""How long the run's threads waited for a core: the load that actually slows the script.

Other processes' busy cores (the sampler's ``other_cores_busy_mean``) say the machine was busy,
not whether that slowed this run: a neighbour on a core the run did not need costs it nothing,
and one that takes a core from a multi-threaded step slows every op. Linux counts, per thread,
the time it was ready to run but waited on a run queue (``/proc/PID/task/TID/schedstat``: time on
a CPU, time waiting, in ns). Summed over the training process's threads between the sampler's
start and its report, that wait is the run's **run delay**: ``run_delay_share`` is the share of
its threads' runnable time spent waiting for a core, ``run_delay_cores`` the number of its
threads waiting on average. A quiet machine leaves both near 0; ``gpuopt check`` reads them to
tell a run the machine slowed (docs/check.md).

DataLoader worker processes are not counted (they come and go); where schedstat is missing
(not Linux, a kernel without it) nothing is reported.

The DataLoader probe reads one thread's counters around a fetch (:class:`ThreadClock`): the
fetch's time on a CPU against its time not waiting for a core tells a loader that computes from
one that waits (I/O, a sleep), on a busy machine as on a quiet one.
"""

from __future__ import annotations

import os
import threading
import time

from msgspec import Struct

from gpuopt.debug import logger

log = logger(__name__)

Snapshot = dict[int, tuple[int, int]]  # tid -> (ns on a CPU, ns waiting on a run queue)


def snapshot(pid: int | None = None) -> Snapshot | None:
    """Every thread's schedstat counters of process ``pid`` (default: this one); None where the
    kernel does not give them."""
    base = f"/proc/{pid or os.getpid()}/task"
    try:
        tids = os.listdir(base)
    except OSError as exc:
        log.debug_once("no thread list to read schedstat from: %s", exc)
        return None
    out: Snapshot = {}
    for tid in tids:
        try:
            with open(f"{base}/{tid}/schedstat", "rb") as fh:
                fields = fh.read().split()
            out[int(tid)] = (int(fields[0]), int(fields[1]))
        except (OSError, ValueError, IndexError) as exc:
            log.debug_once("a thread's schedstat not read: %s", exc)
            continue  # the thread ended meanwhile, or no schedstat
    return out or None


class RunDelay(Struct, frozen=True):
    """The threads' time on a CPU and waiting for one, between two snapshots, in seconds."""

    cpu_s: float
    wait_s: float

    @property
    def share(self) -> float:
        """The share of the runnable time spent waiting for a core."""
        total = self.cpu_s + self.wait_s
        return self.wait_s / total if total > 0 else 0.0


def delta(before: Snapshot, after: Snapshot) -> RunDelay:
    """What the threads alive at ``after`` did since ``before`` (a thread started in between
    counts from its start; one that ended is lost)."""
    cpu = wait = 0
    for tid, (c1, w1) in after.items():
        c0, w0 = before.get(tid, (0, 0))
        if c1 >= c0 and w1 >= w0:  # a reused tid restarts its counters: take the new thread whole
            cpu += c1 - c0
            wait += w1 - w0
        else:
            cpu += c1
            wait += w1
    return RunDelay(cpu / 1e9, wait / 1e9)


class ThreadClock:
    """The calling thread's own counters, cheaply: its schedstat file is opened once per thread
    and read with ``pread`` (8 µs on a loaded 2-core machine, where opening it each time took
    73 µs). Where the kernel has no schedstat, the thread's CPU time and no wait."""

    def __init__(self) -> None:
        self._fds: dict[int, int | None] = {}

    def read(self) -> tuple[int, int]:
        """(ns this thread spent on a CPU, ns it waited on a run queue), since it started."""
        tid = threading.get_native_id()
        fd = self._fds.get(tid, -1)
        if fd == -1:
            try:
                fd = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
            except OSError:
                fd = None
            self._fds[tid] = fd
        if fd is not None:
            try:
                fields = os.pread(fd, 64, 0).split()
                return int(fields[0]), int(fields[1])
            except (OSError, ValueError, IndexError):
                pass
        return time.thread_time_ns(), 0

    def close(self) -> None:
        for fd in self._fds.values():
            if fd is not None:
                os.close(fd)
        self._fds.clear()
