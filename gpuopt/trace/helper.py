"""A forked helper process that decodes the first half of a trace while the parent decodes the rest.

Why: decoding is the largest part of ``gpuopt report TRACE`` on a big trace, and it is CPU-bound
Python work that threads cannot share. The parent forks a helper, reads the helper's progress
from shared memory, gives it half of the text the helper has not reached yet, decodes the second
half itself, then takes the helper's columns.

Measured (docs/bench-trace.md): on this project's 2-vCPU machines two busy processes get ~1.4x
the throughput of one, so the helper cuts load time by about a quarter. Forking it *before* the
parent imports numpy was tried and lost: both processes then import numpy at once, each slower.

Safe by construction:

* The split is only a hint. The helper writes one frame per piece it decoded, tagged with the
  piece's offset; the parent uses a helper piece where there is one and its own otherwise, and if
  a piece was decoded by neither (the helper failed or was killed) it decodes the file again on
  its own. A helper never reports errors: the parent meets the same bad input and reports it.
* Frames are msgpack (plain data: numbers, strings, raw column bytes); nothing is unpickled.
* Only forked from a single-threaded parent, on Linux (``fork`` and ``memfd``), with two or more
  usable cores, for files with at least :data:`MIN_TEXT_BYTES` of JSON text. The environment
  variable ``GPUOPT_TRACE_WORKERS`` overrides: ``0`` never, a positive number always.
* The helper ends with ``os._exit``: no atexit handlers, no flushing of the parent's buffers.
"""

from __future__ import annotations

import mmap
import os
import signal
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuopt.trace import pieces as pieces_mod

MIN_TEXT_BYTES = 4 << 20  # below this, forking and frame copies cost about what they save
_NO_SPLIT = 1 << 62
_SHARED = struct.Struct("<qq")  # split offset (set by the parent), offset of the helper's piece
_I64 = struct.Struct("<q")
_LEN = struct.Struct("<Q")


def wanted(path: Path, workers: int | None = None) -> bool:
    """Is a helper worth forking for ``path``? ``workers``: 0 never, >0 always, None: decide."""
    if workers is None:
        env = os.environ.get("GPUOPT_TRACE_WORKERS", "").strip()
        if env:
            try:
                workers = int(env)
            except ValueError:
                workers = None
    if workers is not None and workers <= 0:
        return False
    if not (sys.platform == "linux" and hasattr(os, "fork") and hasattr(os, "memfd_create")):
        return False
    if workers is not None:
        return True
    if threading.active_count() > 1:  # forking a threaded process can deadlock the child
        return False
    try:
        cores = len(os.sched_getaffinity(0))
    except OSError:
        cores = os.cpu_count() or 1
    return cores >= 2 and pieces_mod.text_size(path) >= MIN_TEXT_BYTES


class DecodeHelper:
    """The parent's handle on one helper process."""

    def __init__(self, pid: int, fd: int, shared: mmap.mmap, size: int) -> None:
        self.pid, self.fd, self.shared, self.size = pid, fd, shared, size
        self._reaped = False

    @classmethod
    def start(cls, path: Path) -> DecodeHelper | None:
        try:
            shared = mmap.mmap(-1, _SHARED.size)  # anonymous and MAP_SHARED: seen by both processes
            _SHARED.pack_into(shared, 0, _NO_SPLIT, -1)
            fd = os.memfd_create("gpuopt-trace-helper", os.MFD_CLOEXEC)
        except (OSError, AttributeError, ValueError):
            return None
        size = pieces_mod.text_size(path)
        try:
            pid = os.fork()
        except OSError:
            os.close(fd)
            return None
        if pid == 0:  # pragma: no cover - runs in the child; its result is tested through the parent
            _helper_main(path, fd, shared)
        return cls(pid, fd, shared, size)

    def claim_rest(self) -> int:
        """The parent is ready: give the helper half of what it has not reached; return the split
        (the parent decodes the pieces that start at or after it)."""
        _, progress = _SHARED.unpack_from(self.shared, 0)
        done = max(progress, 0)
        rest = self.size - done
        split = done + rest // 2 if rest > 2 * pieces_mod.BLOCK else _NO_SPLIT
        _I64.pack_into(self.shared, 0, split)  # one aligned 8-byte store; the helper owns bytes 8..16
        return split

    def collect(self, decode_frame: Callable[[bytes], tuple[int, Any]]) -> dict[int, Any]:
        """Wait for the helper; its decoded pieces by offset (empty if it failed)."""
        self._wait()
        out: dict[int, Any] = {}
        try:
            size = os.fstat(self.fd).st_size
            if size == 0:
                return out
            with mmap.mmap(self.fd, size, prot=mmap.PROT_READ) as data:
                pos = 0
                while pos + _LEN.size <= size:
                    (n,) = _LEN.unpack_from(data, pos)
                    pos += _LEN.size
                    if pos + n > size:
                        break  # a frame cut short (the helper was killed mid-write): ignore it
                    offset, part = decode_frame(data[pos : pos + n])
                    out[offset] = part
                    pos += n
        except (OSError, ValueError):
            return {}
        return out

    def close(self) -> None:
        """Stop the helper if it still runs, reap it, free its memory (idempotent)."""
        if not self._reaped:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
            self._wait()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if not self.shared.closed:
            self.shared.close()

    def _wait(self) -> None:
        if self._reaped:
            return
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        self._reaped = True


def _helper_main(path: Path, fd: int, shared: mmap.mmap) -> None:  # pragma: no cover - child only
    """The helper: decode pieces in file order until one starts at or after the split."""
    code = 1
    try:
        from gpuopt.trace.decode import decode_piece, encode_frame

        stream = pieces_mod.PieceStream(path)
        with open(fd, "wb", buffering=1 << 20, closefd=False) as out:
            for offset, data in stream.pieces():
                split, _ = _SHARED.unpack_from(shared, 0)
                if offset >= split:
                    break
                _I64.pack_into(shared, 8, offset)
                frame = encode_frame(offset, decode_piece(data))
                out.write(_LEN.pack(len(frame)))
                out.write(frame)
        code = 0
    except BaseException:  # noqa: BLE001 - the parent redoes whatever the helper did not finish
        pass
    finally:
        os._exit(code)
