"""Errors that end a gpuopt command with a one-line reason and exit code 2."""

from __future__ import annotations

import sys
from typing import NoReturn


class GpuoptError(Exception):
    """Bad input or usage: the CLI prints ``gpuopt: error: <message>`` and exits with 2.

    The message is one line and, where there is one, names the exact fix.
    """

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


def fail(message: str) -> NoReturn:
    """Print a one-line reason to stderr and exit 2 (bad input or usage)."""
    print(f"gpuopt: error: {' '.join(message.split())}", file=sys.stderr)
    raise SystemExit(2)
