"""Start decoding a trace file before numpy and the analyses are imported.

Why: ``gpuopt report TRACE`` spends 0.10-0.14 s (on this project's 2-core machines) importing
numpy and its analysis modules before it could start decoding, one after the other.
:func:`start` forks the decode helper (:mod:`gpuopt.trace.decode_worker`) as soon as the command
knows its input is a trace file; the helper runs only numpy-free code
(:mod:`gpuopt.trace.events`), so it decodes while the parent imports. :func:`claim`, called by the
loader, hands the running helper over; anything not claimed is stopped by :func:`discard`.

Same safety as the helper itself: the parent checks that the frames cover the text without a gap
and decodes alone otherwise; bad input is reported by the parent; ``GPUOPT_TRACE_WORKERS=0`` turns
it off. This module imports msgspec (the helper needs it) but never numpy.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpuopt.debug import logger
from gpuopt.trace import decode_worker, events

log = logger(__name__)

_started: tuple[tuple[int, int, int, int], decode_worker.DecodeHelper] | None = None


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError as exc:
        log.debug("%s not stat'ed: %s", path, exc)
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def start(path: Path) -> bool:
    """Fork a helper for ``path`` now, if one is worth it (:func:`decode_worker.wanted`: the same
    size threshold as the helper forked after the imports, :func:`decode_worker.min_text_bytes`)."""
    global _started
    discard()
    ident = _identity(path)
    if ident is None or not decode_worker.wanted(path):
        return False
    h = decode_worker.DecodeHelper.start(path, events.helper_frames, early=True)
    if h is None:
        return False
    _started = (ident, h)
    return True


def claim(path: Path) -> decode_worker.DecodeHelper | None:
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
