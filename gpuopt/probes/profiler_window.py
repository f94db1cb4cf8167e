"""The GPU side of the window: a short ``torch.profiler`` run that writes a Kineto trace.

Host-side recording cannot see kernels: how many there are, how long the GPU idles between them,
how late each launch lands. On a machine with CUDA this probe profiles a few steps and writes a
Kineto trace into the run directory; the trace analyses (``gpuopt.trace``) read it like any other
trace. Without CUDA it does nothing and says so.

It profiles the steps right *after* the recorder's window (``window_start + window_steps`` on, for
``window_steps`` steps), because the recorder's Python modes would stretch the gaps between kernels
the trace is meant to measure. ``ctx.extra["profiler_window_start"]`` and
``ctx.extra["profiler_window_steps"]`` override that.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuopt.model.trace import ProfilerWindowInfo
from gpuopt.probes.protocol import RunContext

TRACE_NAME = "profiler-window.pt.trace.json.gz"


@dataclass
class WindowResult:
    """The profiler window's result: the profile's ``trace.profiler_window``, the trace file
    written (None if none) and errors met on the way (they become warnings)."""

    info: ProfilerWindowInfo | None
    trace_file: Path | None
    errors: list[str]


class ProfilerWindow:
    """Runs ``torch.profiler`` (CPU + CUDA activities) for a few steps, only where CUDA exists."""

    name = "profiler_window"

    def __init__(self, require_cuda: bool = True) -> None:
        # require_cuda=False profiles CPU activity only where CUDA is absent: the window logic and
        # the trace file, without kernels (used by the tests on machines without a GPU).
        self.require_cuda = require_cuda
        self.cuda = False
        self.enabled = False
        self.note: str | None = None
        self.start_step = 0
        self.steps = 0
        self.path: Path | None = None
        self.written: Path | None = None
        self.recorded_steps = 0
        self._prof: Any = None
        self._step_span: Any = None
        self._step_number = 0
        self.errors: list[str] = []

    def start(self, ctx: RunContext) -> None:
        self.steps = int(ctx.extra.get("profiler_window_steps", ctx.window_steps))
        self.start_step = int(
            ctx.extra.get("profiler_window_start", ctx.window_start + ctx.window_steps)
        )
        if self.steps <= 0:
            self.note = "GPU profiler window off (--window 0)"
            return
        try:
            import torch
        except ImportError:
            self.note = "GPU profiler window skipped: torch is not importable"
            return
        self.cuda = bool(torch.cuda.is_available())
        if not self.cuda and self.require_cuda:
            self.note = (
                "GPU profiler window skipped: no CUDA device (kernel counts, idle gaps and launch "
                "delays need one)"
            )
            return
        self.enabled = True
        self.path = Path(ctx.out_dir) / TRACE_NAME
        if self.start_step <= 0:
            self._begin()

    def on_step(self, index: int, t: float) -> None:
        if not self.enabled:
            return
        try:
            if self._prof is not None:
                self.recorded_steps += 1
                if index >= self.start_step + self.steps - 1:
                    self._end()
                else:
                    self._mark_step()
            elif index == self.start_step - 1 and self.written is None:
                self._begin()
        except Exception as exc:
            self.errors.append(f"profiler window: {type(exc).__name__}: {exc}")
            self._prof = None
            self.enabled = False

    def stop(self) -> None:
        try:
            if self._prof is not None:
                self._end()
        except Exception as exc:
            self.errors.append(f"profiler window: {type(exc).__name__}: {exc}")
            self._prof = None

    def result(self) -> WindowResult:
        """The trace the window wrote (or why it did not run) and what went wrong on the way."""
        info: ProfilerWindowInfo | None = None
        if self.written is not None:
            info = ProfilerWindowInfo(
                file=self.written.name,
                cuda=self.cuda,
                start_step=self.start_step,
                steps=self.recorded_steps,
            )
        elif self.note:
            info = ProfilerWindowInfo(note=self.note)
        return WindowResult(info, self.written, list(self.errors))

    # -- internals ---------------------------------------------------------------------
    def _begin(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        self._prof = profile(activities=activities)
        self._prof.start()
        self._mark_step()

    def _mark_step(self) -> None:
        """Close the previous ``ProfilerStep#N`` span and open the next one: trace analyses find
        steps by these names (the profiler itself writes them only when given a schedule)."""
        from torch.profiler import record_function

        if self._step_span is not None:
            self._step_span.__exit__(None, None, None)
        self._step_span = record_function(f"ProfilerStep#{self._step_number}")
        self._step_span.__enter__()
        self._step_number += 1

    def _end(self) -> None:
        prof, self._prof = self._prof, None
        span, self._step_span = self._step_span, None
        if span is not None:
            span.__exit__(None, None, None)
        prof.stop()
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(self.path))
        self.written = self.path
