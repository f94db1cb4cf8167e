"""The live progress line on stderr: steps done, step time, data-wait share, utilization.

Only on a terminal (never in CI logs), redrawn at most 4 times a second from the step hook, so it
costs nothing measurable. It writes one ``\\r``-updated line and leaves stdout to the script.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from gpuopt.units import fmt_duration

_MIN_REDRAW_S = 0.25


class LiveLine:
    def __init__(self, clock: Any, loader_probe: Any, sampler: Any, stream: TextIO) -> None:
        self.clock = clock
        self.loader = loader_probe
        self.sampler = sampler
        self.stream = stream
        self._last_draw = 0.0
        self._drawn = False

    @classmethod
    def maybe(
        cls, clock: Any, loader_probe: Any, sampler: Any, stream: TextIO | None = None
    ) -> LiveLine | None:
        stream = stream or sys.stderr
        if not stream.isatty():
            return None
        return cls(clock, loader_probe, sampler, stream)

    def text(self, index: int) -> str:
        ends = self.clock.ends
        parts = [f"gpuopt: step {index + 1}"]
        if len(ends) >= 2:
            recent = ends[-min(len(ends), 11) :]
            per_step = (recent[-1] - recent[0]) / (len(recent) - 1)
            waits = self.loader.wait_by_step
            n = len(recent) - 1
            wait = sum(waits.get(i, 0.0) for i in range(len(ends) - n, len(ends)))
            parts.append(f"{fmt_duration(per_step)}/step")
            if per_step > 0:
                parts.append(f"data wait {100 * wait / (per_step * n):.0f}%")
        cpu, gpu = self.sampler.latest()
        if gpu is not None:
            parts.append(f"GPU {gpu:.0f}%")
        if cpu is not None:
            parts.append(f"CPU {cpu:.0f}%")
        return " · ".join(parts)

    def on_step(self, index: int, t: float) -> None:
        now = time.monotonic()
        if now - self._last_draw < _MIN_REDRAW_S:
            return
        self._last_draw = now
        self.stream.write("\r\x1b[K" + self.text(index))
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
