"""The measuring session: run the user's code with the probes on, collect what they measured.

The session writes a placeholder ``profile.json`` first (``status: interrupted``), so a run
killed outright still leaves a valid document; starts the probes; runs the target in this
process; stops the probes however the target ended; and returns a
:class:`~gpuopt.assemble.run_record.RunRecord` for the assembly. Nothing here builds the
document or judges it.
"""

from __future__ import annotations

import datetime as _dt
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from gpuopt.assemble.run_record import Outcome, RunRecord
from gpuopt.model.document import empty_profile
from gpuopt.probes import steps as steps_mod
from gpuopt.probes.dataloader import DataLoaderProbe
from gpuopt.probes.environment import environment
from gpuopt.probes.profiler_window import ProfilerWindow
from gpuopt.probes.protocol import Probe, RunContext
from gpuopt.probes.recorder import DispatchRecorder
from gpuopt.probes.samplers import UtilizationSampler
from gpuopt.runner.options import ProfileOptions
from gpuopt.runner.run_dir import write_profile
from gpuopt.runner.target import Target, run_target

R = TypeVar("R")


class ProfileSession:
    """One instrumented run. The clock is injectable so tests can drive it deterministically."""

    def __init__(
        self,
        target: Target,
        out: Path,
        opts: ProfileOptions,
        clock: Callable[[], float] = time.perf_counter,
        nvml: Any = "auto",
        rank: int | None = None,
    ) -> None:
        self.target = target
        self.out = out
        self.opts = opts
        self.clock = clock
        self._nvml = nvml
        self.rank = rank
        self.warnings: list[str] = []

    def run(self) -> RunRecord:
        cwd = os.getcwd()
        started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self._write_placeholder(cwd, started_at)
        opts = self.opts
        t_start = self.clock()
        clock = steps_mod.StepClock(clock=self.clock, max_steps=opts.steps)
        loader_probe = DataLoaderProbe(step_count=lambda: clock.count, clock=self.clock)
        nvml, nvml_note = self._open_nvml()
        sampler = UtilizationSampler(interval=opts.sample_interval, nvml=nvml, nvml_note=nvml_note)
        if nvml_note and not opts.quiet:
            print(f"gpuopt: {nvml_note}", file=sys.stderr)
        recorder, window = self._optional_probes()
        probes: list[Probe] = [loader_probe, sampler]
        probes += [p for p in (recorder, window) if p is not None]
        started = self._start(probes)
        for p in started:
            clock.listeners.append(p.on_step)
        progress = None
        if not opts.quiet:
            from gpuopt.runner.progress import LiveLine

            progress = LiveLine.maybe(clock, loader_probe, sampler)
            if progress is not None:
                clock.listeners.append(progress.on_step)
        steps_mod.install(clock)
        outcome: Outcome
        try:
            outcome = run_target(self.target)
        finally:
            steps_mod.uninstall()
            if progress is not None:
                progress.close()
            t_end = self.clock()
            self._stop(started)
        return RunRecord(
            script=self.target.display,
            argv=list(self.target.args),
            cwd=cwd,
            started_at=started_at,
            rank=self.rank,
            warmup=opts.warmup,
            t_start=t_start,
            t_end=t_end,
            outcome=outcome,
            environment=environment(),
            step_ends=list(clock.ends),
            step_sources=set(clock.sources),
            instrumented=self._instrumented_steps(started),
            loaders=self._result(started, loader_probe, loader_probe.result),
            utilization=self._result(started, sampler, sampler.result),
            recorder=self._result(started, recorder, recorder.result) if recorder else None,
            window=self._result(started, window, window.result) if window else None,
            sampler_error=sampler.error,
            warnings=self.warnings,
        )

    def _write_placeholder(self, cwd: str, started_at: str) -> None:
        """A valid profile exists from the first moment: if the process is killed outright, a
        reader finds status "interrupted" rather than nothing."""
        pre = empty_profile(self.target.display, list(self.target.args))
        pre.cwd, pre.started_at, pre.rank = cwd, started_at, self.rank
        pre.status, pre.exit_code = "interrupted", 137
        write_profile(pre, self.out)

    def _start(self, probes: list[Probe]) -> list[Probe]:
        ctx = RunContext(
            script=self.target.display,
            user_roots=self.target.user_roots(),
            out_dir=self.out,
            warmup=self.opts.warmup,
            window_start=self.opts.warmup,
            window_steps=self.opts.window,
            max_steps=self.opts.steps,
            clock=self.clock,
        )
        started: list[Probe] = []
        for p in probes:
            try:
                p.start(ctx)
                started.append(p)
            except Exception as exc:
                self.warnings.append(f"probe {p.name} could not start: {type(exc).__name__}: {exc}")
        return started

    def _stop(self, started: list[Probe]) -> None:
        for p in reversed(started):
            try:
                p.stop()
            except Exception as exc:
                self.warnings.append(f"probe {p.name} failed to stop: {type(exc).__name__}: {exc}")

    def _result(self, started: list[Probe], probe: Probe, result: Callable[[], R]) -> R | None:
        """A started probe's result; None for a probe that did not start, or (with a warning)
        whose result failed."""
        if probe not in started:
            return None
        try:
            return result()
        except Exception as exc:
            self.warnings.append(
                f"probe {probe.name} could not report: {type(exc).__name__}: {exc}"
            )
            return None

    def _open_nvml(self) -> tuple[Any, str | None]:
        if self._nvml == "auto":
            from gpuopt.probes.accelerator import open_nvml

            return open_nvml()
        if self._nvml is None:
            return None, "GPU sampling disabled"
        return self._nvml, None

    def _optional_probes(self) -> tuple[DispatchRecorder | None, ProfilerWindow | None]:
        """The detailed recorder and, on a CUDA machine, the GPU profiler window (neither with
        --window 0)."""
        if self.opts.window <= 0:
            return None, None
        import torch

        return DispatchRecorder(), ProfilerWindow() if torch.cuda.is_available() else None

    def _instrumented_steps(self, probes: list[Probe]) -> set[int]:
        """Steps the recorder or the profiler window slowed down: left out of the statistics
        (their own measurements come from those probes), like warm-up steps."""
        names = {p.name for p in probes}
        w0, w = self.opts.warmup, self.opts.window
        out: set[int] = set()
        if "recorder" in names:
            out.update(range(w0, w0 + w))
        if "profiler_window" in names:
            out.update(range(w0 + w, w0 + 2 * w))
        return out
