"""Start decoding a trace file before numpy and the analyses are imported.

Why: ``gpuopt report TRACE`` spends 0.10-0.14 s (on this project's 2-core machines) importing
numpy and its analysis modules before it could start decoding, one after the other.
:func:`start` forks the decode helper (:mod:`gpuopt.trace.decode_worker`) as soon as the command
knows its input is a trace file: the command line's entry point does, for one path named like a
trace (:mod:`gpuopt.commands.entry`), before the report's own modules and the loader's (the
model, the renderers) are imported; the loader does for any other caller. The helper runs only
numpy-free code (:mod:`gpuopt.trace.events`), so it decodes while the parent imports.
:func:`claim`, called by the loader, hands the running helper over; anything not claimed is
stopped by :func:`discard`.

Same safety as the helper itself: the parent checks that the frames cover the text without a gap
and decodes alone otherwise; bad input is reported by the parent; ``GPUOPT_TRACE_WORKERS=0`` turns
it off. This module imports msgspec (the helper needs it) but never numpy.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

from gpuopt.debug import logger
from gpuopt.trace import decode_worker, events

if TYPE_CHECKING:
    from pathlib import Path

log = logger(__name__)

_started: tuple[tuple[int, int, int, int], decode_worker.DecodeHelper] | None = None


def _identity(path: str | Path) -> tuple[int, int, int, int] | None:
    """A regular file's device, inode, size and mtime; None for anything else."""
    try:
        st = os.stat(path)
    except OSError as exc:
        log.debug("%s not stat'ed: %s", path, exc)
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def start(path: str | Path) -> bool:
    """Fork a helper for ``path`` now, if one forked before the imports is worth it
    (:func:`decode_worker.wanted`); a helper forked for this very file already (by the command's
    entry point) is kept. Only for a regular file: a FIFO or a device is never opened here."""
    global _started
    ident = _identity(path)
    if _started is not None and ident is not None and _started[0] == ident:
        return True
    discard()
    if ident is None or not decode_worker.wanted(path, early=True):
        return False
    h = decode_worker.DecodeHelper.start(path, events.helper_frames, early=True)
    if h is None:
        return False
    _started = (ident, h)
    return True


def claim(path: str | Path) -> decode_worker.DecodeHelper | None:
    """The helper :func:`start` forked for this very file (same device, inode, size and mtime),
    or None; a helper for another file, or for a file changed since, is stopped."""
    global _started
    if _started is None:
        return None
    ident, h = _started
    _started = None
    if _identity(path) == ident:
        return h
    h.close()
    return None


def discard() -> None:
    """Stop and reap a helper nobody claimed (the command failed before loading)."""
    global _started
    if _started is not None:
        _started[1].close()
        _started = None
