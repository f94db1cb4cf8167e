"""Where the script's own output goes while ``gpuopt profile`` runs it.

With ``--format json``, ``md`` or ``html`` the report on stdout is a document a user keeps
(``gpuopt profile --format html train.py > report.html``), so the script's prints must not land
in it: while the script runs, file descriptor 1 is a copy of stderr (its prints, a C library's,
its DataLoader workers' and any child's), and stdout is back for the report once it has ended.
The text report, made to be read with the script's output, leaves stdout alone.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager


def report_on_stdout(fmt: str, quiet: bool) -> bool:
    """Whether the run ends with a document on stdout that the script's output would spoil."""
    return not quiet and fmt != "text"


def children_stdout(fmt: str, quiet: bool) -> int | None:
    """The stdout of processes that run the script (torchrun's ranks): stderr's descriptor when
    the report is a document on stdout and stderr is open, else None (inherited)."""
    if not report_on_stdout(fmt, quiet):
        return None
    try:
        os.fstat(2)
    except OSError:
        return None
    return 2


@contextmanager
def script_stdout_to_stderr(active: bool = True) -> Iterator[None]:
    """While the block runs, what is written to stdout goes to stderr; then stdout is back, with
    nothing the block wrote left in its buffer. Does nothing without an open stdout and stderr
    (``>&-``, ``2>&-``): there is nowhere else to put it."""
    saved = _redirect() if active else None
    try:
        yield
    finally:
        if saved is not None:
            _restore(*saved)


def _flush() -> None:
    try:
        if sys.stdout is not None and not sys.stdout.closed:
            sys.stdout.flush()
    except (OSError, ValueError):
        pass


def _redirect() -> tuple[int, bool | None] | None:
    """fd 1 made a copy of fd 2: a copy of the real stdout returned, with sys.stdout's line
    buffering before (None: nothing done)."""
    _flush()
    try:
        os.fstat(2)
        saved = os.dup(1)
    except OSError:
        return None
    try:
        os.dup2(2, 1)
    except OSError:
        os.close(saved)
        return None
    # prints reach stderr line by line, among gpuopt's own lines (a file or a pipe as stdout
    # had made them wait in a block buffer)
    return saved, _line_buffered(True)


def _restore(saved: int, line_buffering: bool | None) -> None:
    """The real stdout back on fd 1, unless the script closed fd 1 (then it stays closed, as
    the script left it, and gets no report)."""
    _flush()
    if line_buffering is not None:
        _line_buffered(line_buffering)
    try:
        os.fstat(1)
        os.dup2(saved, 1)
    except OSError:
        pass
    finally:
        os.close(saved)


def _line_buffered(on: bool) -> bool | None:
    """Set sys.stdout's line buffering; what it was (None: it cannot be set)."""
    out = sys.stdout
    reconfigure = getattr(out, "reconfigure", None)
    if reconfigure is None or out is None or out.closed:
        return None
    before = bool(getattr(out, "line_buffering", False))
    try:
        reconfigure(line_buffering=on)
    except (OSError, ValueError):
        return None
    return before
