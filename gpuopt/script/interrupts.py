"""Signals while ``gpuopt optimize`` runs: SIGTERM unwinds it as Ctrl-C does, its children end
with it, and a user's file is replaced between two signals, never across one.

* :func:`terminate_unwinds`: while optimize runs, SIGTERM raises :class:`Terminated` where the
  command is, so that what it holds is let go on the way out (children ended, temporary files
  removed); then the signal is delivered again with its default action, and the process ends
  as SIGTERM ends it (143 in a shell).
* :func:`run`: a child process (a run, an analysis) in a session of its own; whatever ends the
  wait for it (a signal, an exception, its timeout) kills its whole process group (its
  DataLoader workers too) and reaps it: no orphan, no zombie.
* :func:`deferred`: SIGINT and SIGTERM held while a user's file is replaced (its temporary, its
  backup, the rename) and delivered right after, so that the file is as it was or as rewritten,
  with a backup beside it only when rewritten.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

from gpuopt.debug import logger

log = logger(__name__)

_HELD = (signal.SIGINT, signal.SIGTERM)


class Terminated(BaseException):  # noqa: N818 - named for the signal, as KeyboardInterrupt is
    """SIGTERM, raised where ``gpuopt optimize`` was when it came."""


def _main_thread() -> bool:
    """Signal handlers can be set from the main thread only."""
    return threading.current_thread() is threading.main_thread()


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated


@contextmanager
def terminate_unwinds() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` inside; leaving by it, the process ends by SIGTERM."""
    if not _main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    except Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)  # ends the process here, as the signal would have
        raise SystemExit(128 + signal.SIGTERM) from None  # where SIGTERM is ignored
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


@contextmanager
def deferred() -> Iterator[None]:
    """SIGINT and SIGTERM held inside, delivered (to the handlers that were there) on the way
    out."""
    if not _main_thread():
        yield
        return
    pending: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        pending.append(signum)

    previous = {s: signal.signal(s, hold) for s in _HELD}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        for signum in dict.fromkeys(pending):
            log.debug("signal %d held while a file was replaced: delivered now", signum)
            signal.raise_signal(signum)


def run(
    argv: Sequence[str], timeout: float | None, **popen: Any
) -> subprocess.CompletedProcess[Any] | None:
    """Run ``argv`` to its end (``popen``: :class:`subprocess.Popen`'s arguments); None when it
    ran past ``timeout`` (it is ended then)."""
    proc = subprocess.Popen(argv, start_new_session=True, **popen)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        end(proc)
        return None
    except BaseException:
        end(proc)
        raise
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


def end(proc: subprocess.Popen[Any]) -> None:
    """Kill ``proc``'s process group (``proc`` leads it) and reap ``proc``; a second signal
    meanwhile waits until this is done."""
    with deferred():
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError) as exc:
            log.debug("process group %d not killed (%s): the child alone", proc.pid, exc)
            proc.kill()
        proc.communicate()
