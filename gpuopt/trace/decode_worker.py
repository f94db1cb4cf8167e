"""A forked helper process that decodes the second half of a trace while the parent decodes the
first.

Why: decoding is the largest part of ``gpuopt report TRACE`` on a big trace, and it is CPU-bound
Python work that threads cannot share. The parent forks a helper and decodes the pieces that start
before the split (:data:`PARENT_SHARE` of the text); the helper decompresses its way past the split
(gunzip alone is fast) and decodes the rest, then hands its columns and the text's tail back. The
parent never decompresses the second half at all.

Two starts. :mod:`gpuopt.trace.decode_ahead` forks it as soon as ``gpuopt report`` knows its
input is a trace file, before numpy is imported (from :data:`QUIET_EARLY_MIN_TEXT_BYTES` of JSON
while no other task is runnable): the helper runs only numpy-free code
(:mod:`gpuopt.trace.events`), so it decodes while the parent imports, and its share grows by
:data:`EARLY_TEXT_BYTES`, what it decodes in that time (:func:`split_for`). Otherwise (a folder of
ranks, ``gpuopt profile``'s window) the loader forks it after the imports. (A helper that imported
numpy too would import at the same time as the parent, each slower: the early helper stays
numpy-free.) The parent reads each frame as soon as it is written (a byte on a pipe says so), so
it merges the first pieces while the helper still decodes the last.

Measured (docs/bench-trace.md): on this project's 2-vCPU machines two busy processes get between
1.1x and 2x the throughput of one, changing from minute to minute, so the helper saves far less
than half the load time here.

Safe by construction:

* The helper writes one frame per piece, tagged with where the piece lies in the text, and a last
  frame with the tail. The parent checks that the frames continue exactly where it stopped and
  reach the tail; if not (the helper failed or was killed), it decodes the file again on its own.
  A helper never reports errors: the parent meets the same bad input and reports it.
* Frames are msgpack (plain data: numbers, strings, raw column bytes); nothing is unpickled.
* Only forked from a single-threaded parent, on Linux (``fork`` and ``memfd``), with two or more
  usable cores, for files with at least :data:`MIN_TEXT_BYTES` of JSON text
  (:data:`BUSY_MIN_TEXT_BYTES` while the load average is at or above the cores,
  :data:`QUIET_EARLY_MIN_TEXT_BYTES` forked early with no other task runnable). The environment
  variable ``GPUOPT_TRACE_WORKERS`` overrides: ``0`` never, a positive number always.
* The helper ends with ``os._exit``: no atexit handlers, no flushing of the parent's buffers. It
  dies with its parent (``PR_SET_PDEATHSIG``), even when the parent is killed outright.
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

# Below this much JSON the helper saved under 0.02 s (5-8%) and added a second process's memory
# (measured: docs/bench-trace.md); from ~25 MB up it saves 0.02-0.4 s. Forked early (before the
# imports) it saved 5-32% of the whole run from 25 MB up in every benchmark run, while on the
# 9.8 MB trace comparisons ranged from 12% faster to 24% slower and on 2.8 MB it did not pay: the
# fork's copy-on-write faults and a helper decoding the whole file while the parent imports weigh
# as much as the decoding it moves, on two vCPUs that give 1.1-2x one's throughput.
from gpuopt.debug import logger
from gpuopt.trace import pieces as pieces_mod

if TYPE_CHECKING:  # pathlib: imported after the early helper is forked
    from pathlib import Path

log = logger(__name__)

MIN_TEXT_BYTES = 16 << 20
# On a busy machine (1-minute load average at or above the usable cores) the scheduler shares the
# cores among runnable processes, so a helper brings its own share: at a load of 4 on top of others'
# (2 vCPUs) it took 0.84x the wall time on 9.8 MB of JSON, 0.87x on 15.4 MB, 0.90x on 25.8 MB
# (medians of 10 alternating runs each, docs/bench-trace.md).
BUSY_MIN_TEXT_BYTES = 8 << 20
# Forked before numpy is imported while no other task is runnable (the second core free), the
# helper decodes the whole file while the parent imports: 0.90x the wall time on 4.8 MB of JSON,
# 0.82x on 9.8 MB, 0.79-0.83x on 15.4 MB; 1.8 MB: no gain (medians of 9-11 alternated runs, load
# 1). Beside one busy process it was 6-16% slower from 4.8 to 25.8 MB (docs/bench-trace.md).
QUIET_EARLY_MIN_TEXT_BYTES = 4 << 20
# The parent's share: a little over half, since the helper also decompresses the parent's half.
PARENT_SHARE = 0.55
# How much JSON a helper forked before the parent's imports decodes while the parent imports numpy
# and the analyses: at 12 MB the helper finished first and the parent was the critical path. 28 MB
# against 12 on an idle machine (10 pairs, docs/bench-trace.md): 0.94x the wall time on a 25.8 MB
# trace (the helper decodes all of it), 0.91x on 53.7 MB; 40 MB: no better.
EARLY_TEXT_BYTES = 28 << 20
_LEN = struct.Struct("<Q")
# Linux's number (the helper runs on Linux only): importing the signal module took 1-3 ms of the
# report's start-up (its enums)
SIGKILL = 9
T = TypeVar("T")


def wanted(path: str | Path, workers: int | None = None, early: bool = False) -> bool:
    """Is a helper worth forking for ``path``? ``workers``: 0 never, >0 always, None: decide
    (two or more usable cores and at least :func:`min_text_bytes` of JSON; ``early``: forked
    before the parent's imports)."""
    if workers is None:
        env = os.environ.get("GPUOPT_TRACE_WORKERS", "").strip()
        if env:
            try:
                workers = int(env)
            except ValueError:
                log.debug("GPUOPT_TRACE_WORKERS=%r is not a number: ignored", env)
                workers = None
    if workers is not None and workers <= 0:
        return False
    if not (sys.platform == "linux" and hasattr(os, "fork") and hasattr(os, "memfd_create")):
        return False
    if workers is not None:
        return True
    threading = sys.modules.get("threading")  # never imported: no thread was started
    if threading is not None and threading.active_count() > 1:
        return False  # forking a threaded process can deadlock the child
    try:
        cores = len(os.sched_getaffinity(0))
    except OSError as exc:
        log.debug("sched_getaffinity failed (%s): cpu_count instead", exc)
        cores = os.cpu_count() or 1
    return cores >= 2 and pieces_mod.text_size(path) >= min_text_bytes(cores, early)


def min_text_bytes(cores: int, early: bool = False) -> int:
    """The least JSON a helper is forked for: :data:`BUSY_MIN_TEXT_BYTES` while the cores are
    busy (load average); :data:`QUIET_EARLY_MIN_TEXT_BYTES` for an ``early`` helper while numpy
    is still to be imported (the import it overlaps) and no other task is runnable; else
    :data:`MIN_TEXT_BYTES`."""
    try:
        busy = os.getloadavg()[0] >= cores
    except OSError:  # no load average on this system
        busy = False
    if busy:
        return BUSY_MIN_TEXT_BYTES
    if early and "numpy" not in sys.modules and others_runnable() == 0:
        return QUIET_EARLY_MIN_TEXT_BYTES
    return MIN_TEXT_BYTES


def others_runnable() -> int | None:
    """How many other tasks (threads) are runnable now, system-wide (Linux's ``/proc/loadavg``:
    its runnable count holds this process); None where that cannot be read."""
    try:
        with open("/proc/loadavg", "rb") as f:
            return int(f.read().split()[3].split(b"/")[0]) - 1
    except (OSError, ValueError, IndexError):
        return None


def split_for(text_bytes: int, early: bool) -> int:
    """Where the helper's pieces begin. Forked after the parent's imports, the helper takes a
    little under half (it also decompresses the parent's half). Forked before them
    (:mod:`gpuopt.trace.decode_ahead`), it first takes the :data:`EARLY_TEXT_BYTES` the parent would
    spend importing, and the two share the rest as before."""
    if not early:
        return int(text_bytes * PARENT_SHARE)
    return int(max(0, text_bytes - EARLY_TEXT_BYTES) * PARENT_SHARE)


# What the helper runs: (the file's piece stream, the split) -> the frames to write, in order.
# Given by the decoder (:func:`gpuopt.trace.events.helper_frames`), so this module knows nothing
# of columns.
FrameWriter = Callable[[pieces_mod.PieceStream, int], Iterator[bytes]]


class DecodeHelper:
    """The parent's handle on one helper process."""

    def __init__(self, pid: int, fd: int, split: int, ready: int) -> None:
        # fd: the helper's frames (a memfd); ready: a pipe's read end, a byte per frame written,
        # at its end once the helper has exited
        self.pid, self.fd, self.split, self.ready = pid, fd, split, ready
        self._reaped = False

    @classmethod
    def start(
        cls, path: str | Path, frames: FrameWriter, early: bool = False
    ) -> DecodeHelper | None:
        """Fork a helper for the pieces of ``path`` that start at or after the split
        (:func:`split_for`; ``early``: forked before the parent's imports)."""
        split = split_for(pieces_mod.text_size(path), early)
        try:
            fd = os.memfd_create("gpuopt-trace-helper", os.MFD_CLOEXEC)
        except (OSError, AttributeError) as exc:
            log.debug("no decode helper: memfd_create failed: %s", exc)
            return None
        try:
            ready, written = os.pipe()
        except OSError as exc:  # out of file descriptors
            log.debug("no decode helper: pipe failed: %s", exc)
            os.close(fd)
            return None
        parent = os.getpid()
        try:
            pid = os.fork()
        except OSError as exc:
            log.debug("no decode helper: fork failed: %s", exc)
            for f in (fd, ready, written):
                os.close(f)
            return None
        if (
            pid == 0
        ):  # pragma: no cover - runs in the child; its result is tested through the parent
            os.close(ready)
            _die_with(parent)
            _helper_main(path, fd, written, split, frames)
        os.close(written)
        return cls(pid, fd, split, ready)

    def frames(self, read: Callable[[memoryview], T]) -> Iterator[T]:
        """``read`` each of the helper's frames in order, as soon as the helper has written it
        (fewer, or none, if it failed): the parent takes in the first frames while the helper
        still decodes the last. ``read`` gets a view into the helper's memory and must not keep
        it."""
        pos = 0
        ended = False
        try:
            while not ended:
                ended = not os.read(self.ready, 4096)  # a frame is written, or the helper ended
                size = os.fstat(self.fd).st_size
                if size - pos < _LEN.size:
                    continue
                # mapped, not read: pread copied each frame once more (0.5-1 ms on 15.4 MB of JSON)
                base = pos - pos % mmap.ALLOCATIONGRANULARITY
                with (
                    mmap.mmap(self.fd, size - base, prot=mmap.PROT_READ, offset=base) as data,
                    memoryview(data) as view,
                ):
                    while pos + _LEN.size <= size:
                        (n,) = _LEN.unpack_from(view, pos - base)
                        start = pos - base + _LEN.size
                        if start + n > size - base:
                            break  # still being written, or cut short (the helper was killed)
                        with view[start : start + n] as frame:
                            got = read(frame)
                        pos += _LEN.size + n
                        yield got
        except (OSError, ValueError) as exc:
            log.debug("the decode helper's output not read (%s): decoded here", exc)
        self._wait()

    def close(self) -> None:
        """Stop the helper if it still runs, reap it, free its memory (idempotent)."""
        if not self._reaped:
            try:
                os.kill(self.pid, SIGKILL)
            except OSError as exc:
                log.debug("the decode helper %d not killed: %s", self.pid, exc)
            self._wait()
        for name in ("fd", "ready"):
            if getattr(self, name) >= 0:
                os.close(getattr(self, name))
                setattr(self, name, -1)

    def _wait(self) -> None:
        if self._reaped:
            return
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError as exc:
            log.debug("the decode helper %d reaped already: %s", self.pid, exc)
        self._reaped = True


def _die_with(parent: int) -> None:  # pragma: no cover - child only
    """Ask Linux to kill the helper if the parent dies (``PR_SET_PDEATHSIG``), so a parent killed
    outright never leaves a helper decoding on its own; exit now if the parent is already gone."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError) as exc:
        log.debug("the decode helper's PR_SET_PDEATHSIG not set: %s", exc)
    if os.getppid() != parent:
        os._exit(1)


def _helper_main(  # pragma: no cover
    path: str | Path, fd: int, written: int, split: int, frames: FrameWriter
) -> None:
    """The helper: skip (decompress only) the pieces before the split, encode the rest and the
    tail, a byte on ``written`` after each frame."""
    code = 1
    try:
        stream = pieces_mod.PieceStream(path)
        with open(fd, "wb", buffering=1 << 20, closefd=False) as out:
            for frame in frames(stream, split):
                out.write(_LEN.pack(len(frame)))
                out.write(frame)
                out.flush()
                os.write(written, b"\0")
        code = 0
    except BaseException as exc:  # noqa: BLE001 - the parent redoes what the helper did not finish
        log.debug("the decode helper stopped: %r", exc, exc_info=True)
    finally:
        os._exit(code)
