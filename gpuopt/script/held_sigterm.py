"""SIGTERM while gpuopt writes the profile waits until the profile is written.

While the script runs, SIGTERM unwinds it like Ctrl-C (:func:`gpuopt.script.target.run_target`);
before and after that, Python's default would end the process at once, leaving only the
placeholder or the last checkpoint of the running profile (torchrun sends SIGTERM to every rank
as soon as one fails, while the others still assemble theirs). Inside :func:`held_sigterm` the
signal is noted instead: a script not yet started does not start (:func:`sigterm_pending`), and
once the profile is written the process ends by SIGTERM, as it would have without gpuopt.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

_pending: list[int] = []  # the SIGTERMs noted inside held_sigterm


def _note(signum: int, frame: FrameType | None) -> None:
    _pending.append(signum)


def sigterm_pending() -> bool:
    """Whether a SIGTERM came inside :func:`held_sigterm` and is still to end the process."""
    return bool(_pending)


def end_by_sigterm() -> None:
    """End as the script would have without gpuopt, now that the profile is written: killed by
    SIGTERM (``$?`` 143 in a shell, -15 to ``subprocess``; a supervisor sees the signal)."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


@contextmanager
def held_sigterm() -> Iterator[None]:
    """Note SIGTERM in the block; at its normal end, a noted one ends the process. (An error
    leaving the block is reported as usual; the block's caller exits on it soon anyway.)"""
    try:
        previous: Any = signal.signal(signal.SIGTERM, _note)
    except ValueError:  # not the main thread (tests driving the runner from a thread)
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
    if _pending:
        end_by_sigterm()
