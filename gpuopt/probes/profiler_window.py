"""The GPU side of the window: a short ``torch.profiler`` run that writes a Kineto trace.

Host-side recording cannot see kernels: how many there are, how long the GPU idles between them,
how late each launch lands. On a machine with CUDA this probe profiles a few steps and writes a
Kineto trace into the run directory; the trace analyses (``gpuopt.trace``) read it like any other
trace. Without CUDA it does nothing and says so.

It profiles the steps right *after* the recorder's window (``window_start + window_steps`` on, for
``window_steps`` steps), because the recorder's Python modes would stretch the gaps between kernels
the trace is meant to measure. ``ctx.extra["profiler_window_start"]`` and
``ctx.extra["profiler_window_steps"]`` override that.

What the window leaves behind, and what it must not:

* **No CUPTI after the window.** Kineto keeps CUPTI attached after a CUDA trace ends unless
  ``TEARDOWN_CUPTI=1`` (pytorch/pytorch#144455: training stays 10-20% slower for the rest of the
  run; the H200's first run measured gpuopt's profile at 1.11-1.34x on 4 ms steps). Where the
  user has not set it and CUDA is 12.6 or later (teardown is safe there with CUDA graphs too,
  kineto#1264), the window sets ``TEARDOWN_CUPTI=1`` before it starts; Kineto reads it when the
  trace ends. Without teardown, CUPTI would be left attached for the rest of the run.
* **Nothing on the user's stderr.** torch's Python warnings ("Profiler clears events at the end
  of each cycle...") and Kineto's native log lines (``USDT: ... profiler_start``) raised while the
  window starts and stops are not the user's: they are dropped; anything else written to stderr
  meanwhile (another thread's lines) is passed on.
* **The user's lines.** After the run, each op of the trace gets the user's line the recorder's
  window found for it (:mod:`gpuopt.probes.window_sites`), so the idle causes name a file:line.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from msgspec import Struct

from gpuopt.debug import logger
from gpuopt.model.trace import ProfilerWindowInfo
from gpuopt.paths import WINDOW_TRACE_NAME
from gpuopt.probes.protocol import RunContext
from gpuopt.probes.window_sites import OpSites, annotate_trace

log = logger(__name__)

TRACE_NAME = WINDOW_TRACE_NAME
# Kineto's and glog's native log lines (not the user's): "USDT:2026-11-26 16:52:20 28074:28074
# SyncActivityProfilerHandler.cpp:59] profiler_stop", "STAGE:...", "ERROR:2026-11-28 21:09:43
# 15628:15628 DeviceProperties.cpp:56] gpuGetDeviceCount failed" (a CUDA build without a GPU),
# "W1126 16:52:20.1 ... ]".
_NATIVE_LOG = re.compile(
    rb"^(USDT:|STAGE:|(INFO|WARNING|ERROR):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ "
    rb"|\[?[IWEF]\d{4} \d\d:\d\d:\d\d)"
)
TEARDOWN_ENV = "TEARDOWN_CUPTI"


class WindowResult(Struct):
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
        # the recorder's ops and lines, read once the run has ended (set by the session)
        self.site_source: Callable[[], OpSites] | None = None
        self.sites_added = 0
        self.teardown_set = False  # this window set TEARDOWN_CUPTI=1

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
                    self._end(complete=True)
                else:
                    self._mark_step()
            elif index == self.start_step - 1 and self.written is None:
                self._begin()
        except Exception as exc:
            log.debug("probe profiler-window: gave up at step %d", index, exc_info=True)
            self.errors.append(f"profiler window: {type(exc).__name__}: {exc}")
            self._prof = None
            self.enabled = False

    def stop(self) -> None:
        try:
            if self._prof is not None:
                self._end()
        except Exception as exc:
            log.debug("probe profiler-window: failed to end its window", exc_info=True)
            self.errors.append(f"profiler window: {type(exc).__name__}: {exc}")
            self._prof = None
        self._add_sites()

    def _add_sites(self) -> None:
        """The recorder's lines onto the trace's ops, once the script has ended."""
        if self.written is None or self.site_source is None or self.sites_added:
            return
        try:
            self.sites_added = annotate_trace(self.written, self.site_source())
        except Exception as exc:  # the trace stays as torch wrote it
            log.debug("probe profiler-window: user lines not added", exc_info=True)
            self.errors.append(
                f"profiler window: user lines not added: {type(exc).__name__}: {exc}"
            )

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
        if self.cuda:
            self.teardown_set = request_cupti_teardown()
        with quiet_profiler():
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

    def _end(self, complete: bool = False) -> None:
        """Stop the profiler and write its trace. ``complete``: the window's last step ended
        (else the run ended inside it). Trace analyses drop a trace's last ``ProfilerStep``
        (HTA's rule, gpuopt.trace.prepare: the profiler usually cuts it off), so a complete
        window ends with an empty step of its own for them to drop (else a window of three
        steps reads as two). A step the run's end cut off stays the last one."""
        from torch.profiler import record_function

        prof, self._prof = self._prof, None
        span, self._step_span = self._step_span, None
        if span is not None:
            span.__exit__(None, None, None)
        if complete:
            with record_function(f"ProfilerStep#{self._step_number}"):
                pass
        with quiet_profiler():
            prof.stop()
            assert self.path is not None
            self.path.parent.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(self.path))
        self.written = self.path


def request_cupti_teardown(environ: Any = None, cuda_version: str | None = None) -> bool:
    """Set ``TEARDOWN_CUPTI=1`` unless the user (or torch, for CUDA graphs) set it, on CUDA
    12.6 or later; True when it was set here."""
    env = os.environ if environ is None else environ
    if TEARDOWN_ENV in env:
        return False
    if cuda_version is None:
        import torch

        cuda_version = torch.version.cuda
    try:
        major, minor = (int(x) for x in str(cuda_version).split(".")[:2])
    except ValueError:
        log.debug("CUDA version %r not read: TEARDOWN_CUPTI left unset", cuda_version)
        return False
    if (major, minor) < (12, 6):
        return False
    env[TEARDOWN_ENV] = "1"
    return True


@contextmanager
def quiet_profiler() -> Iterator[None]:
    """Around the profiler's own calls: its Python warnings ignored, and its native log lines
    (written to file descriptor 2 by Kineto, not through ``sys.stderr``) dropped; every other
    line written to stderr meanwhile is passed on when the call returns."""
    import tempfile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError, AttributeError) as exc:  # no fd 2 (a closed or replaced)
            log.debug("torch's teardown messages not hidden: no stderr fd (%s)", exc)
            yield
            return
        with tempfile.TemporaryFile() as tmp:
            os.dup2(tmp.fileno(), 2)
            try:
                yield
            finally:
                try:
                    sys.stderr.flush()
                except (OSError, ValueError, AttributeError) as exc:
                    log.debug("stderr not flushed: %s", exc)
                os.dup2(saved, 2)
                os.close(saved)
                tmp.seek(0)
                kept = [ln for ln in tmp.read().splitlines(True) if not _NATIVE_LOG.match(ln)]
                if kept:
                    os.write(2, b"".join(kept))
