"""Errors that end a gpuopt command with a one-line reason and exit code 2."""

from __future__ import annotations

import sys
from typing import NoReturn

from gpuopt.debug import logger

log = logger(__name__)


class GpuoptError(Exception):
    """Bad input or usage: the CLI prints ``gpuopt: error: <message>`` and exits with 2.

    The message is one line and, where there is one, names the exact fix.
    """

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class NotATrace(GpuoptError):
    """A file that is another kind of JSON document, not a trace (no ``traceEvents``, a JSON
    array): a folder of traces skips it with a note (TraceLens writes
    ``execution_details.json`` beside its traces); given alone, it is refused like any bad
    input. A damaged trace (truncated, not JSON) is not this: it is refused even in a folder."""


def say(line: str) -> None:
    """Print ``line`` on stderr, never failing: a stderr that is closed (``2>&-``, or a script
    that closed it) loses the line, not the command's exit code."""
    err = sys.stderr
    if err is None:
        return
    try:
        print(line, file=err)
        err.flush()
    except (OSError, ValueError) as exc:
        log.debug("a line not written to stderr (%s): %s", exc, line)


def fail(message: str) -> NoReturn:
    """Print a one-line reason to stderr and exit 2 (bad input or usage)."""
    say(f"gpuopt: error: {' '.join(message.split())}")
    raise SystemExit(2)
