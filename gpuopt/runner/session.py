"""The measuring session: run the user's code with the probes on, collect what they measured.

The session writes a placeholder ``profile.json`` first (``status: interrupted``), starts the
probes, runs the target in this process, stops the probes however the target ended, and returns
a :class:`~gpuopt.assemble.run_record.RunRecord` for the assembly. Nothing here builds the
document or judges it; when the run must be written before it ends, the session hands its record
to ``finish`` (the assembly and the rules, given by the command) and writes what comes back:

* every :data:`CHECKPOINT_S` seconds of a running script, when a step has ended since the last
  checkpoint (so a process killed outright — SIGKILL, the OOM killer — leaves its steps so far),
  less often when writing would take more than :data:`CHECKPOINT_SHARE` of the run
  (:class:`CheckpointSchedule`);
* when the script calls ``os._exit(N)``, which runs no ``finally`` and no ``atexit``: the profile
  is written with exit code N before the process ends.

A child the script ``os.fork()``s runs the rest of gpuopt's code too; it never writes or reports
(:class:`ChildExit`).
"""

from __future__ import annotations

import datetime as _dt
import operator
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from msgspec import Struct

from gpuopt import debug, torch_compat
from gpuopt.assemble.run_record import RunRecord
from gpuopt.errors import GpuoptError, say
from gpuopt.model.outcome import Outcome
from gpuopt.model.profile import Profile, RunError
from gpuopt.probes import own_cost
from gpuopt.probes import steps as steps_mod
from gpuopt.probes.compile import CompileProbe
from gpuopt.probes.dataloader import DataLoaderProbe
from gpuopt.probes.environment import environment
from gpuopt.probes.framework import FrameworkProbe
from gpuopt.probes.protocol import Probe, RunContext
from gpuopt.probes.ranks import wanted
from gpuopt.probes.recorder import DispatchRecorder
from gpuopt.probes.samplers import UtilizationSampler
from gpuopt.probes.slow_steps import SlowStepSampler
from gpuopt.runner.options import ProfileOptions
from gpuopt.runner.run_dir import RunDirectory
from gpuopt.script.sources import overridden
from gpuopt.script.target import Target, run_target

if TYPE_CHECKING:  # probes a run has only on a GPU, with torchrun, or with an option: imported then
    from gpuopt.probes.collectives import CollectiveProbe
    from gpuopt.probes.memory import MemoryProbe
    from gpuopt.probes.profiler_window import ProfilerWindow
    from gpuopt.probes.training_record import TrainingRecorder

R = TypeVar("R")
log = debug.logger(__name__)
Finish = Callable[[RunRecord], Profile]

CHECKPOINT_S = 2.0  # the least time between checkpoints of a running profile (seconds)
# ... and at most this share of the run spent writing them: a checkpoint's cost grows with the
# steps so far (measured: 1.2 ms at 45 KiB, 112 ms for 53,000 steps, 10 MB), so a long run of
# short steps writes less often instead of stalling its training loop (docs/reliability.md)
CHECKPOINT_SHARE = 0.01


class CheckpointSchedule(Struct):
    """When the running profile is written again: :data:`CHECKPOINT_S` after the last write
    began and a step has ended since, or later when the last write took more than
    :data:`CHECKPOINT_SHARE` of that time (the wait becomes its cost / CHECKPOINT_SHARE)."""

    every: float = CHECKPOINT_S
    last: float = 0.0  # when the last write began (the session's clock)
    steps: int = 0  # the steps it held

    def due(self, now: float, steps: int) -> bool:
        return now - self.last >= self.every and steps != self.steps

    def written(self, began: float, ended: float, steps: int) -> None:
        self.last, self.steps = began, steps
        self.every = max(CHECKPOINT_S, (ended - began) / CHECKPOINT_SHARE)


_BEFORE_START = Outcome(
    "interrupted", 130, RunError(type="KeyboardInterrupt", message="interrupted before the run")
)
_KILLED = Outcome(
    "interrupted",
    137,
    RunError(
        type="Killed",
        message="the run ended without gpuopt seeing it end (killed outright: SIGKILL, the OOM "
        "killer); this is its state at the last checkpoint",
    ),
)


class ChildExit(Struct, frozen=True):
    """The session ended in a child the script forked: leave with this code, write nothing."""

    exit_code: int


class ProfileSession:
    """One instrumented run. The clock is injectable so tests can drive it deterministically."""

    def __init__(
        self,
        target: Target,
        run_dir: RunDirectory,
        opts: ProfileOptions,
        clock: Callable[[], float] = time.perf_counter,
        nvml: Any = "auto",
        rank: int | None = None,
        finish: Finish | None = None,
    ) -> None:
        self.target = target
        self.run_dir = run_dir
        self.opts = opts
        self.clock = clock
        self._nvml = nvml
        self.rank = rank
        self.finish = finish
        self.warnings: list[str] = []
        self.cwd = os.getcwd()
        self.started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self.steps = steps_mod.StepClock(clock=clock, max_steps=opts.steps)
        # the step count as one C call per batch (no lambda, no property)
        self.loader_probe = DataLoaderProbe(step_count=self.steps.ends.__len__, clock=clock)
        self.sampler: UtilizationSampler | None = None
        self.recorder: DispatchRecorder | None = None
        self.window: ProfilerWindow | None = None
        self.memory: MemoryProbe | None = None  # --memory-for, or a GPU
        self.training = _training_recorder(opts.seed) if opts.record_losses else None
        self.slow_steps: SlowStepSampler | None = None  # not in a timed run
        # one rank of several (torchrun): time in collectives per step
        self.collectives = _collective_probe(clock) if rank is not None or wanted() else None
        self.compile_probe = CompileProbe()  # torch.compile: Dynamo's records (docs/compile.md)
        self.framework_probe = FrameworkProbe()  # the HF Trainer, accelerate ...
        self.fixes_applied: list[str] = []  # --fixes DIR: the run-time fixes patched in
        self._undo_fixes: Callable[[], None] | None = None
        self._late_fix_notes: list[str] = []
        self._copies: dict[str, str] = {}  # rewritten private copies of the user's files
        self.started: list[Probe] = []
        self.t_start = self.t_end = 0.0
        self._checkpoints = CheckpointSchedule()
        self._ending = False
        self._stopped = False
        self.checkpoint_error: str | None = None  # the last checkpoint's failure, if it failed
        entry = sys.modules.get("gpuopt.commands.entry")
        # gpuopt's first line in this process (its console script's), else this session's start
        self.started_at_clock: float = getattr(entry, "STARTED_AT", None) or time.perf_counter()
        self.torch_import_s = 0.0  # torch's import, when gpuopt's start-up did it
        self.script_started: float | None = None  # when the script's first line ran

    def run(self) -> RunRecord | ChildExit:
        own_cost.reset()
        self._import_torch()
        self.run_dir.claim(self.target.display, list(self.target.args), self.rank)
        self.t_start = self.clock()
        outcome = _BEFORE_START
        try:
            self._start_probes()
            outcome = self._run_target()
        except KeyboardInterrupt:  # Ctrl-C while gpuopt was starting, before the script ran
            log.debug("interrupted before the script ran")
        finally:
            self.t_end = self.clock()
            if self.memory is not None:
                self.memory.outcome = outcome  # an OOM's post-mortem needs how it ended
            self._stop()
        log.debug(
            "the script ended: %s, exit code %d, %d step(s) marked by %s%s; warnings: %s",
            outcome.status,
            outcome.exit_code,
            self.steps.count,
            self.steps.marker,
            " (stopped by --steps)" if outcome.stopped_by_steps else "",
            self.warnings,
        )
        if not self.run_dir.owned():
            return ChildExit(outcome.exit_code)
        return self.record(outcome)

    def record(self, outcome: Outcome, checkpoint: bool = False) -> RunRecord:
        """The run so far as the assembly reads it (a checkpoint leaves out the recorder and the
        profiler window, whose results exist only once they have stopped)."""
        full = not checkpoint
        return RunRecord(
            script=self.target.display,
            argv=list(self.target.args),
            cwd=self.cwd,
            started_at=self.started_at,
            rank=self.rank,
            warmup=self.opts.warmup_used,
            t_start=self.t_start,
            t_end=self.t_end if full else self.clock(),
            outcome=outcome,
            environment=environment(),
            step_ends=list(self.steps.ends),
            step_sources=set(self.steps.sources),
            step_marker=self.steps.marker,
            instrumented=self._instrumented_steps(),
            loaders=self._result(self.loader_probe, self.loader_probe.result, full),
            training=self._result(self.training, self.training.result, full)
            if self.training and full
            else None,
            fixes_applied=list(self.fixes_applied),
            collectives=self._result(self.collectives, self.collectives.result, full)
            if self.collectives
            else None,
            compile=self._result(self.compile_probe, self.compile_probe.result, full),
            framework=self._result(self.framework_probe, self.framework_probe.result, full),
            slow_steps=self._result(self.slow_steps, self.slow_steps.result, full)
            if self.slow_steps and full
            else None,
            utilization=self._result(self.sampler, self.sampler.result, full)
            if self.sampler
            else None,
            recorder=self._result(self.recorder, self.recorder.result, full)
            if self.recorder and full
            else None,
            window=self._result(self.window, self.window.result, full)
            if self.window and full
            else None,
            memory=self._result(self.memory, self.memory.result, full) if self.memory else None,
            sampler_error=self.sampler.error if self.sampler else None,
            warnings=self._warnings(full),
            spent=self.spent(),
        )

    def _import_torch(self) -> None:
        """Import torch now, timed: the script pays its import without gpuopt too, so it is no
        part of gpuopt's start-up cost. gpuopt's own objects, all made by now, leave the garbage
        collector's sight first (``gc.freeze``): torch's import otherwise runs one full
        collection more, walking them too (3 instead of plain python's 2, +70-90 ms of CPU here);
        the script's own objects, all made later, are collected as without gpuopt."""
        if "torch" in sys.modules:
            return
        import gc

        gc.freeze()
        t0 = time.perf_counter()
        import torch  # noqa: F401

        self.torch_import_s = time.perf_counter() - t0

    def spent(self) -> own_cost.Spent:
        """gpuopt's own costs so far (``overhead``, :mod:`gpuopt.probes.own_cost`)."""
        started = self.script_started if self.script_started is not None else time.perf_counter()
        threads = sum(
            p.cpu_time.seconds
            for p in (self.sampler, self.slow_steps)
            if p is not None and p in self.started
        )
        return own_cost.Spent(
            start_s=max(started - self.started_at_clock - self.torch_import_s, 0.0),
            step_costs=list(own_cost.step_costs),
            threads_s=threads,
            recorded=self._recorded_in_case(),
        )

    def _recorded_in_case(self) -> list[int]:
        """The recorder's last warm-up step, recorded in case the window never comes, where it
        was and the statistics keep it (its cost is a window step's, 5-15 ms here)."""
        rec = self.recorder
        if rec is None or rec not in self.started:
            return []
        step = rec.warmup_recorded()
        return [] if step is None else [step]

    def _warnings(self, full: bool) -> list[str]:
        if full and self.checkpoint_error is not None:
            note = f"the last checkpoint of the running profile failed: {self.checkpoint_error}"
            return [*self.warnings, note]
        return list(self.warnings)

    # -- start, run, stop -----------------------------------------------------------------
    def _apply_fixes(self) -> None:
        """``--fixes DIR``: patch the run-time fixes in, and note the rewritten copies to run."""
        if self.opts.fixes is None:
            return
        from gpuopt.fixes.runtime import apply_fixes, load_fixes

        fixes = load_fixes(self.opts.fixes)
        applied = apply_fixes(fixes, self.target.user_roots(), self.run_dir.path)
        self._undo_fixes = applied.undo
        self._late_fix_notes = applied.late_notes
        self._copies = dict(fixes.sources)
        self.fixes_applied = [*fixes.fixes]
        self.warnings.extend(f"fixes: {n}" for n in applied.notes if "nothing to patch" in n)
        log.debug("fixes from %s: %s; notes: %s", self.opts.fixes, fixes.fixes, applied.notes)

    def _start_probes(self) -> None:
        torch_compat.take_unavailable()  # the private torch names missing for this run, from now
        debug.say_torch()
        self._apply_fixes()
        if self.opts.seed is not None and self.training is None:
            from gpuopt.probes.training_record import seed_everything

            seed_everything(self.opts.seed)
        if not self.opts.measure_only:  # a timed run has no sampler thread, no checkpoint
            self.sampler = self._sampler()
        self.recorder, self.window = self._optional_probes()
        if self.window is not None:
            self.window.site_source = self._recorded_sites
        ctx = RunContext(
            script=self.target.display,
            user_roots=self.target.user_roots(),
            out_dir=self.run_dir.path,
            warmup=self.opts.warmup_used,
            window_start=self.opts.warmup_used,
            window_steps=self.opts.window,
            max_steps=self.opts.steps,
            clock=self.clock,
        )
        # the compile probe's CPU profile of one step: none in a timed run
        ctx.extra["compile_window_step"] = (
            None if self.opts.measure_only else self._compile_window_step()
        )
        self.memory = None if self.opts.measure_only else self._memory_probe()
        probes: list[Probe] = [self.loader_probe]
        if self.sampler is not None:
            probes.append(self.sampler)
        probes.append(self.compile_probe)
        probes.append(self.framework_probe)
        # the memory probe first: it stops last, when no other probe's hooks or modes are on
        # (its replays run then)
        if self.memory is not None:
            probes.insert(0, self.memory)
        if self.training is not None:
            probes.append(self.training)
        if not self.opts.measure_only:
            self.slow_steps = SlowStepSampler()
            probes.append(self.slow_steps)
        if self.collectives is not None:
            probes.append(self.collectives)
        self._say_skipped()
        for p in [*probes, *(q for q in (self.recorder, self.window) if q is not None)]:
            try:
                p.start(ctx)
                self.started.append(p)
                log.debug("probe %s: installed", p.name)
            except Exception as exc:
                self.warnings.append(f"probe {p.name} could not start: {type(exc).__name__}: {exc}")
                log.debug("probe %s: gave up at start", p.name, exc_info=True)

    def _say_skipped(self) -> None:
        """Debug lines: the probes this run goes without, and why."""
        if not log.enabled():
            return
        o = self.opts
        timed = "--measure-only (a timed run)"
        no_window = "--window 0" if o.window <= 0 else "no CUDA device"
        skipped: dict[str, tuple[object, str]] = {
            "sampler": (self.sampler, timed),
            "recorder": (self.recorder, "--window 0"),
            "profiler-window": (self.window, timed if o.measure_only else no_window),
            "memory": (self.memory, timed if o.measure_only else "no --memory-for, no CUDA device"),
            "training": (self.training, "no --record-losses"),
            "collectives": (self.collectives, "one process: no torchrun rank, no process group"),
        }
        for name, (probe, reason) in skipped.items():
            if probe is None:
                log.debug("probe %s: skipped: %s", name, reason)

    def _run_target(self) -> Outcome:
        for p in self.started:
            if getattr(p, "steps_wanted", True):
                self.steps.listeners.append(p.on_step)
        progress = None
        if not self.opts.quiet and self.sampler is not None:
            from gpuopt.runner.progress import LiveLine

            progress = LiveLine.maybe(self.steps, self.loader_probe, self.sampler)
            if progress is not None:
                self.steps.listeners.append(progress.on_step)
        steps_mod.install(self.steps)
        real_exit, real_execv, real_execve = os._exit, os.execv, os.execve
        os._exit = self._exit_hook(real_exit)  # type: ignore[assignment]
        # os.execl, execlp, execvp, ... all call these two (os module globals, looked up then)
        os.execv = self._exec_hook("execv", real_execv)
        os.execve = self._exec_hook("execve", real_execve)
        try:
            with overridden(self._copies):
                self.script_started = time.perf_counter()
                return run_target(self.target)
        finally:
            os._exit, os.execv, os.execve = real_exit, real_execv, real_execve
            steps_mod.uninstall()
            if progress is not None:
                progress.close()

    def _stop(self) -> None:
        """Stop every started probe (once: an exec that failed stopped them already)."""
        if self._stopped:
            return
        self._stopped = True
        for p in reversed(self.started):
            try:
                p.stop()
                log.debug("probe %s: stopped", p.name)
            except Exception as exc:
                self.warnings.append(f"probe {p.name} failed to stop: {type(exc).__name__}: {exc}")
                log.debug("probe %s: failed to stop", p.name, exc_info=True)
        if self._undo_fixes is not None:
            self._undo_fixes()
            self._undo_fixes = None
            self.warnings.extend(f"fixes: {n}" for n in self._late_fix_notes if "no module" in n)
        # what the probes could not do on this torch, each a labelled "not available" line
        self.warnings.extend(torch_compat.take_unavailable())

    # -- writing before the run ends ------------------------------------------------------
    def _checkpoint(self) -> None:
        """From the sampler's thread: write the run so far when :class:`CheckpointSchedule`
        says it is due."""
        now = self.clock()
        if self._ending or self.finish is None or not self.run_dir.owned():
            return
        if not self._checkpoints.due(now, self.steps.count):
            return
        try:
            record = self.record(_KILLED, checkpoint=True)
            profile = self.finish(record)
            profile.warnings.append(
                f"the run had not ended when this profile was written ({len(record.step_ends)} "
                "step(s) so far): if nothing replaced it, the process was killed outright"
            )
            self.run_dir.write_profile(profile)
        except Exception as exc:  # a checkpoint that fails must not stop the run or the sampler
            self.checkpoint_error = f"{type(exc).__name__}: {exc}"  # tried again next tick
            log.debug("checkpoint failed (tried again next tick)", exc_info=True)
            return
        self._checkpoints.written(now, self.clock(), len(record.step_ends))
        self.checkpoint_error = None

    def _exit_hook(self, real_exit: Callable[[int], NoReturn]) -> Callable[[int], NoReturn]:
        """``os._exit`` while the script runs: this process writes its profile first (a
        DataLoader worker or any other child passes straight through). A code ``os._exit``
        refuses (not an int, beyond a C int) raises in the script as it would without gpuopt."""

        def _exit(code: int) -> NoReturn:
            status = _c_int(code)
            if self._writes() and status is not None:
                self._ending = True
                try:
                    self._write_at_exit(status, code)
                except GpuoptError as exc:
                    say(f"gpuopt: error: {exc}")
                except BaseException as exc:  # the process is leaving: never stand in its way
                    log.debug("profile not written at os._exit: %r", exc, exc_info=True)
            real_exit(code)

        return _exit

    def _writes(self) -> bool:
        """Whether an ending of the script seen now is this session's to write."""
        return self.run_dir.owned() and not self._ending and self.finish is not None

    def _write_at_exit(self, status: int, code: int) -> None:
        """``os._exit(code)``: the process leaves with ``status`` (the code's low byte)."""
        error = None if status == 0 else RunError(type="os._exit", message=f"os._exit({code})")
        outcome = Outcome("ok" if status == 0 else "error", status, error)
        path = self._write_final(outcome)
        say(f"gpuopt: profile written to {path} (the script called os._exit)")

    def _write_final(self, outcome: Outcome, exit_code_known: bool = True) -> Path | None:
        """Stop measuring and write the profile now: the process is about to end or become
        another program (``exit_code_known`` False: its exit code, null in the profile, will be
        that program's, which only the parent process sees)."""
        self.t_end = self.clock()
        steps_mod.uninstall()
        self._stop()
        assert self.finish is not None
        profile = self.finish(self.record(outcome))
        if not exit_code_known:
            profile.exit_code = None
        return self.run_dir.write_profile(profile)

    def _exec_hook(self, name: str, real: Callable[..., NoReturn]) -> Callable[..., NoReturn]:
        """``os.execv`` / ``os.execve`` while the script runs: the process is about to become
        another program, whose exit code gpuopt will never see, so the profile is written first
        (the steps so far, status ok, ``error.type`` exec naming the program). If the exec
        fails, the script gets the OSError as under python and goes on, no longer measured."""

        def _exec(path: Any, argv: Any, *rest: Any) -> NoReturn:
            if not (self._writes() and _execs(argv)):
                real(path, argv, *rest)  # a child's, or one python refuses before trying
            self._ending = True
            try:
                self._write_before_exec(name, path, argv)
            except GpuoptError as exc:
                say(f"gpuopt: error: {exc}")
            except BaseException as exc:  # noqa: BLE001 - never stand in the exec's way
                log.debug("profile not written before os.%s: %r", name, exc, exc_info=True)
            try:
                real(path, argv, *rest)
            except BaseException as exc:
                self._ending = False  # the script goes on: its end is still to be written
                self.warnings.append(
                    f"os.{name} failed ({type(exc).__name__}: {exc}); gpuopt stopped measuring "
                    f"there, after {self.steps.count} step(s), and the script went on"
                )
                raise

        return _exec

    def _write_before_exec(self, name: str, path: Any, argv: Any) -> None:
        try:
            shown = " ".join(os.fsdecode(a) for a in argv) or os.fsdecode(path)
        except (TypeError, ValueError) as exc:
            log.debug("exec's argv not decoded (%s): shown as its path", exc)
            shown = repr(path)
        program = shown if len(shown) <= 200 else shown[:197] + "..."
        error = RunError(
            type="exec",
            message=f"the script replaced its process with `{program}` (os.{name}) after "
            f"{self.steps.count} step(s); that program's exit code is the process's, known "
            "only to the process that started it (exit_code null)",
        )
        written = self._write_final(Outcome("ok", 0, error), exit_code_known=False)
        say(
            f"gpuopt: profile written to {written} (the script called os.{name}; "
            f"gpuopt report {self.run_dir.shown} shows it)"
        )

    # -- the probes -----------------------------------------------------------------------
    def _result(self, probe: Probe | None, result: Callable[[], R], warn: bool = True) -> R | None:
        """A started probe's result; None for a probe that did not start, or (with a warning)
        whose result failed."""
        if probe is None or probe not in self.started:
            return None
        try:
            return result()
        except Exception as exc:
            if warn:
                self.warnings.append(
                    f"probe {probe.name} could not report: {type(exc).__name__}: {exc}"
                )
            log.debug("probe %s: could not report", probe.name, exc_info=True)
            return None

    def _sampler(self) -> UtilizationSampler:
        nvml, nvml_note = self._open_nvml()
        sampler = UtilizationSampler(
            interval=self.opts.sample_interval, nvml=nvml, nvml_note=nvml_note
        )
        if self.finish is not None:
            sampler.after_tick = self._checkpoint
        if nvml_note:
            log.debug("probe sampler: %s", nvml_note)
        if nvml_note and not self.opts.quiet:
            print(f"gpuopt: {nvml_note}", file=sys.stderr)
        return sampler

    def _open_nvml(self) -> tuple[Any, str | None]:
        if self._nvml == "auto":
            from gpuopt.probes.accelerator import open_nvml

            return open_nvml()
        if self._nvml is None:
            return None, "GPU sampling disabled"
        return self._nvml, None

    def _optional_probes(self) -> tuple[DispatchRecorder | None, ProfilerWindow | None]:
        """The detailed recorder and, on a CUDA machine, the GPU profiler window (neither with
        --window 0). A timed run (``--measure-only``) keeps the recorder's batch shapes only
        (a fix that changes the samples a step takes is measured per sample)."""
        if self.opts.measure_only:
            return DispatchRecorder(shapes_only=True), None
        if self.opts.window <= 0:
            return None, None
        import torch

        if not torch.cuda.is_available():
            return DispatchRecorder(), None
        from gpuopt.probes.profiler_window import ProfilerWindow

        return DispatchRecorder(), ProfilerWindow()

    def _recorded_sites(self) -> list[tuple[str, str | None]]:
        """The recorder's last window step: its ops in order, with their user lines (the
        profiler window's trace takes its lines from them)."""
        engine = self.recorder.engine if self.recorder is not None else None
        return engine.op_sites() if engine is not None else []

    def _memory_probe(self) -> MemoryProbe | None:
        """With --memory-for, or on a machine with a GPU: the memory probe."""
        import torch

        cuda = torch.cuda.is_available()
        if self.opts.memory_for is None and not cuda:
            return None
        from gpuopt.memory.cuda import CudaAllocator
        from gpuopt.memory.devices import device_memory
        from gpuopt.probes.memory import MemoryProbe

        device = device_memory(self.opts.memory_for) if self.opts.memory_for else None
        probe = self.loader_probe

        def hint() -> list[int]:
            return [
                s.batch_size
                for s in list(probe.loaders.values())
                if s.batch_size and s.eval_batches < max(s.batches, 1)
            ]

        return MemoryProbe(device, CudaAllocator() if cuda else None, batch_size_hint=hint)

    def _compile_window_step(self) -> int:
        """The step the compile probe profiles on the CPU: the first after the recorder's window
        and the GPU profiler window (the recorder's torch modes make Dynamo run the compiled
        functions' original code; two profilers cannot run at once)."""
        w0, w = self.opts.warmup_used, self.opts.window
        if w <= 0:
            return w0
        return w0 + w + (w if self.window is not None else 0)

    def _instrumented_steps(self) -> set[int]:
        """Steps the recorder (its window, and on a framework's run the steps after it whose
        Python it samples) or the profiler window slowed down: left out of the statistics
        (their own measurements come from those probes), like warm-up steps."""
        w0, w = self.opts.warmup_used, self.opts.window
        out: set[int] = set()
        if self.opts.measure_only:
            return out
        if self.recorder is not None and self.recorder in self.started:
            out.update(range(w0, w0 + w))
            out.update(self.recorder.python_steps())  # a framework's Python, sampled after it
            if self.recorder.warmup_used:  # its last warm-up step, recorded, stands for it
                out.add(w0 - 1)
        if self.window is not None and self.window in self.started:
            out.update(range(w0 + w, w0 + 2 * w))
        if self.memory is not None and self.memory in self.started:
            out.update(self.memory.instrumented_steps())
        if self.compile_probe.window_used is not None:
            out.add(self.compile_probe.window_used)
        return out


def _collective_probe(clock: Callable[[], float]) -> CollectiveProbe:
    from gpuopt.probes.collectives import CollectiveProbe

    return CollectiveProbe(clock=clock)


def _training_recorder(seed: int | None) -> TrainingRecorder:
    from gpuopt.probes.training_record import TrainingRecorder

    return TrainingRecorder(seed)


def _c_int(code: object) -> int | None:
    """The status ``os._exit(code)`` leaves with (its low byte: 300 is 44), or None when it would
    raise instead (not an integer, beyond a C int), as it then does in the script."""
    try:
        value = operator.index(code)  # type: ignore[arg-type]
    except TypeError as exc:
        log.debug("os._exit(%r) will raise in the script: %s", code, exc)
        return None
    return value & 0xFF if -(1 << 31) <= value < 1 << 31 else None


def _execs(argv: object) -> bool:
    """Whether ``os.execv(path, argv)`` gets as far as trying (else it raises ValueError or
    TypeError first, in the script as without gpuopt, and nothing needs writing)."""
    if not isinstance(argv, (list, tuple)) or not argv:
        return False
    first = argv[0]
    return isinstance(first, (str, bytes, os.PathLike)) and bool(os.fspath(first))
