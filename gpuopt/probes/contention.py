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
"""

from __future__ import annotations

import os
from dataclasses import dataclass

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


@dataclass(frozen=True)
class RunDelay:
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
