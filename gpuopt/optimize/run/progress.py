"""Live progress of ``gpuopt optimize`` on stderr: the phase, run k of n, elapsed time.

On a terminal a rich status line is redrawn in place; elsewhere (CI logs, a pipe) each phase and
run is one plain line, so the log still says what took the time. ``--quiet`` prints nothing.
stdout is never touched: it carries the diff.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any


class Phases:
    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.t0 = time.perf_counter()
        self.runs = 0
        self.total = 0  # runs planned so far (0: not known yet)
        self._status: Any = None
        self._console: Any = None

    def __enter__(self) -> Phases:
        if not self.quiet and sys.stderr.isatty():
            from rich.console import Console

            self._console = Console(stderr=True)
            self._status = self._console.status("gpuopt optimize: starting")
            self._status.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def _say(self, text: str) -> None:
        if self.quiet:
            return
        line = f"gpuopt optimize: {text} ({time.perf_counter() - self.t0:.0f} s)"
        if self._status is not None:
            self._status.update(line)
            if self._console is not None:
                self._console.print(line, highlight=False, markup=False)
        else:
            print(line, file=sys.stderr, flush=True)

    def phase(self, text: str) -> None:
        self._say(text)

    def run(self, label: str) -> None:
        self.runs += 1
        of = f" of {self.total}" if self.total >= self.runs else ""
        self._say(f"run {self.runs}{of}: {label}")

    def note(self, text: str) -> None:
        self._say(text)
