"""CPU% and RSS of the process tree read straight from Linux's ``/proc``, without psutil.

The utilization sampler reads the run's process and its descendants (DataLoader workers and
what they start) every 0.2 s. psutil reads the same files, but importing it and making its first
``Process`` cost 10-25 ms before the script's first line, and a read of one process through it
(``oneshot``, ``cpu_percent``, ``memory_info``) 0.1-0.35 ms of the GIL the training thread
needs; here a process is one read of ``/proc/PID/stat`` (CPU ticks and RSS), the tree comes from
``/proc/PID/task/TID/children``, and the machine's busy cores from ``/proc/stat``, computed as
psutil computes them (:class:`gpuopt.probes.samplers.ProcessTreeCpu` is the psutil way, used
where these files are missing).
"""

from __future__ import annotations

import os
import time

from gpuopt.debug import logger

log = logger(__name__)

_CHILD_REFRESH_S = 1.0  # between looks for new descendants
# /proc/PID/stat after the command's closing parenthesis: field 3 (state) is index 0, so utime
# (field 14), stime (15) and rss (24, in pages) are these
_UTIME, _STIME, _RSS = 11, 12, 21


def available(pid: int | None = None) -> bool:
    """Whether this system has the files :class:`ProcTreeCpu` reads (Linux >= 3.5)."""
    me = pid or os.getpid()
    return all(
        os.path.exists(p)
        for p in (f"/proc/{me}/stat", f"/proc/{me}/task/{me}/children", "/proc/stat")
    )


class ProcTreeCpu:
    """CPU% (one core = 100, summed over the tree) and RSS (bytes, summed) of a process and its
    descendants, each process's CPU% over the time since it was last read (a new descendant
    counts from its second read, as psutil's ``cpu_percent(None)`` primes)."""

    def __init__(self, pid: int | None = None) -> None:
        self.root = pid or os.getpid()
        self._tick = float(os.sysconf("SC_CLK_TCK"))
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._last: dict[int, tuple[float, float]] = {}  # pid -> (CPU seconds, when read)
        self._last_refresh = -1e9
        self._prime(self.root)
        self._machine = _machine_times()

    def pids(self) -> set[int]:
        return set(self._last)

    def machine_percent(self) -> float:
        """CPU percent of the whole machine since the last call, in units of one core = 100
        (psutil's ``cpu_percent(None)`` times the cores)."""
        now = _machine_times()
        (tot0, busy0), (tot1, busy1) = self._machine, now
        self._machine = now
        if tot1 - tot0 <= 0:
            return 0.0
        share = min(max((busy1 - busy0) / (tot1 - tot0), 0.0), 1.0)
        return round(share * 100, 1) * (os.cpu_count() or 1)

    def read(self, now: float) -> tuple[float, int]:
        """(CPU percent summed over the tree, one core = 100; RSS bytes summed). ``now``: the
        sampler's clock, which paces the look for new descendants."""
        if now - self._last_refresh >= _CHILD_REFRESH_S:
            self._last_refresh = now
            for kid in self._descendants():
                if kid not in self._last:
                    self._prime(kid)
        cpu, rss = 0.0, 0
        for pid in list(self._last):
            got = self._stat(pid)
            if got is None:
                del self._last[pid]  # gone
                continue
            seconds, resident = got
            t = time.monotonic()
            before, then = self._last[pid]
            self._last[pid] = (seconds, t)
            if t > then:
                cpu += max(seconds - before, 0.0) / (t - then) * 100
            rss += resident
        return cpu, rss

    def _prime(self, pid: int) -> None:
        got = self._stat(pid)
        if got is not None:
            self._last[pid] = (got[0], time.monotonic())

    def _stat(self, pid: int) -> tuple[float, int] | None:
        """(CPU seconds, RSS bytes) of ``pid``; None once it is gone."""
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                data = f.read()
            fields = data[data.rindex(b")") + 2 :].split()
            ticks = int(fields[_UTIME]) + int(fields[_STIME])
            return ticks / self._tick, int(fields[_RSS]) * self._page
        except (OSError, ValueError, IndexError) as exc:
            log.debug_once("a process's /proc/PID/stat not read: %s", exc)
            return None

    def _descendants(self) -> list[int]:
        """The root's descendants, from each thread's ``children`` file, depth first."""
        out: list[int] = []
        todo = [self.root]
        while todo:
            pid = todo.pop()
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError as exc:
                log.debug_once("a process gone before its threads were read: %s", exc)
                continue
            for tid in tids:
                try:
                    with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                        kids = [int(k) for k in fh.read().split()]
                except (OSError, ValueError) as exc:
                    log.debug_once("a thread's children not read: %s", exc)
                    continue  # the thread ended meanwhile
                todo += kids
                out += kids
        return out


def _machine_times() -> tuple[float, float]:
    """The machine's (all, busy) CPU ticks from ``/proc/stat``'s first line, as psutil counts
    them: guest time is inside user time already, idle and iowait are not busy."""
    try:
        with open("/proc/stat", "rb") as f:
            first = f.readline().split()[1:]
    except OSError as exc:
        log.debug_once("/proc/stat not read: %s", exc)
        return 0.0, 0.0
    t = [float(x) for x in first]
    total = sum(t) - sum(t[8:10])  # guest, guest_nice
    idle = t[3] + (t[4] if len(t) > 4 else 0.0)  # idle, iowait
    return total, total - idle
