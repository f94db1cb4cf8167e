"""``gpuopt profile``: run the user's code with the probes on, then write and show the profile."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from gpuopt.errors import GpuoptError, fail
from gpuopt.probes.base import Probe, RunContext
from gpuopt.runner.script import Outcome, Target, check_target, run_target
from gpuopt.schema import empty_profile, write_profile


@dataclass
class ProfileOptions:
    script: str | None
    module: str | None
    args: list[str]
    out: Path | None = None
    steps: int | None = None
    warmup: int = 2
    window: int = 3
    sample_interval: float = 0.2
    nproc_per_node: int | None = None
    quiet: bool = False
    fmt: str = "text"


def default_out_dir(stem: str, now: _dt.datetime | None = None) -> Path:
    now = now or _dt.datetime.now()
    base = Path("gpuopt-runs") / f"{stem}-{now:%Y%m%d-%H%M%S}"
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


def prepare_out_dir(out: Path) -> Path:
    if out.exists() and not out.is_dir():
        raise GpuoptError(f"{out}: exists and is not a directory; pick another -o DIR")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GpuoptError(f"{out}: cannot create run directory: {exc.strerror or exc}") from None
    if not os.access(out, os.W_OK):
        raise GpuoptError(f"{out}: run directory is not writable")
    return out


def run_profile(opts: ProfileOptions) -> NoReturn:
    """The ``profile`` command as both entry paths run it (typer's, and gpuopt.entry's fast one):
    exits with the script's exit code, or 2 with a one-line reason for bad input."""
    try:
        code = profile_command(opts)
    except GpuoptError as exc:
        fail(str(exc))
    raise SystemExit(code)


def profile_command(opts: ProfileOptions) -> int:
    """Validate, run, write ``profile.json``, print the report. Returns the script's exit code."""
    target = Target(opts.script, opts.module, list(opts.args))
    check_target(target)
    if opts.nproc_per_node is not None:
        from gpuopt.runner.distributed import launch

        return launch(opts, target)
    out = prepare_out_dir(opts.out or default_out_dir(target.stem))
    session = ProfileSession(target, out, opts)
    doc = session.run()
    if not opts.quiet:
        from gpuopt.report import print_report

        print_report(doc, opts.fmt)
    print(f"gpuopt: profile written to {out / 'profile.json'}", file=sys.stderr)
    return int(doc["exit_code"])


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

    def _base_doc(self) -> dict[str, Any]:
        doc = empty_profile(self.target.display, list(self.target.args))
        doc["cwd"] = os.getcwd()
        doc["started_at"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        doc["rank"] = self.rank
        return doc

    def run(self) -> dict[str, Any]:
        from gpuopt.probes import steps as steps_mod
        from gpuopt.probes.dataloader import DataLoaderProbe
        from gpuopt.probes.samplers import UtilizationSampler

        opts = self.opts
        doc = self._base_doc()
        # A valid profile exists from the first moment: if the process is killed outright, a
        # reader finds status "interrupted" rather than nothing.
        pre = dict(doc, status="interrupted", exit_code=137)
        write_profile(pre, self.out / "profile.json")

        t_start = self.clock()
        clock = steps_mod.StepClock(clock=self.clock, max_steps=opts.steps)
        loader_probe = DataLoaderProbe(step_count=lambda: clock.count, clock=self.clock)
        nvml, nvml_note = self._open_nvml()
        sampler = UtilizationSampler(interval=opts.sample_interval, nvml=nvml, nvml_note=nvml_note)
        probes: list[Probe] = [loader_probe, sampler, *self._optional_probes()]
        ctx = RunContext(
            script=self.target.display,
            user_roots=self.target.user_roots(),
            out_dir=self.out,
            warmup=opts.warmup,
            window_start=opts.warmup,
            window_steps=opts.window,
            max_steps=opts.steps,
            clock=self.clock,
        )
        warnings: list[str] = []
        if nvml_note and not opts.quiet:
            print(f"gpuopt: {nvml_note}", file=sys.stderr)
        started: list[Probe] = []
        for p in probes:
            try:
                p.start(ctx)
                started.append(p)
            except Exception as exc:
                warnings.append(f"probe {p.name} could not start: {type(exc).__name__}: {exc}")
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
            for p in reversed(started):
                try:
                    p.stop()
                except Exception as exc:
                    warnings.append(f"probe {p.name} failed to stop: {type(exc).__name__}: {exc}")
        return self._finish(doc, outcome, clock, loader_probe, started, t_start, t_end, warnings)

    def _open_nvml(self) -> tuple[Any, str | None]:
        if self._nvml == "auto":
            from gpuopt.probes.accelerator import open_nvml

            return open_nvml()
        if self._nvml is None:
            return None, "GPU sampling disabled"
        return self._nvml, None

    def _optional_probes(self) -> list[Probe]:
        """The detailed recorder and the GPU profiler window, when present and asked for."""
        out: list[Probe] = []
        if self.opts.window <= 0:
            return out
        try:
            from gpuopt.probes.recorder import DispatchRecorder
        except ImportError:
            DispatchRecorder = None  # type: ignore[assignment,misc]  # noqa: N806
        if DispatchRecorder is not None:
            out.append(DispatchRecorder())
        try:
            from gpuopt.probes.profiler_window import ProfilerWindow
        except ImportError:
            ProfilerWindow = None  # type: ignore[assignment,misc]  # noqa: N806
        if ProfilerWindow is not None:
            import torch

            if torch.cuda.is_available():
                out.append(ProfilerWindow())
        return out

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

    def _finish(
        self,
        doc: dict[str, Any],
        outcome: Outcome,
        clock: Any,
        loader_probe: Any,
        probes: list[Probe],
        t_start: float,
        t_end: float,
        warnings: list[str],
    ) -> dict[str, Any]:
        from gpuopt.findings.engine import evaluate
        from gpuopt.runner import stats

        doc["status"] = outcome.status
        doc["exit_code"] = outcome.exit_code
        if outcome.error:
            doc["error"] = outcome.error
        doc["stopped_by_steps"] = outcome.stopped_by_steps
        doc["wall_s"] = t_end - t_start
        doc["environment"] = environment()
        warmup = self.opts.warmup
        ends = list(clock.ends)
        step0_start = t_start
        first_fetch = loader_probe.first_fetch_t
        if ends and first_fetch is not None and first_fetch < ends[0]:
            step0_start = first_fetch
        times = stats.step_times(step0_start, ends)
        instrumented = self._instrumented_steps(probes)
        measured = stats.measured_indices(len(ends), warmup)
        kept = [i for i in measured if i not in instrumented]
        if kept:
            measured = kept
        elif measured and instrumented & set(measured):
            warnings.append(
                "every measured step was inside the recorder's window, which slows the steps it records: "
                "step times are inflated; run more steps or use --window 0"
            )
        doc["_measured_indices"] = measured
        waits = loader_probe.wait_by_step
        m_times = [times[i] for i in measured]
        m_waits = [min(waits.get(i, 0.0), times[i]) for i in measured]
        doc["steps"] = {
            "count": len(ends),
            "measured": len(measured),
            "warmup": warmup if len(ends) > warmup else 0,
            "time_s": stats.time_stats(m_times),
            "marked_by": sorted(clock.sources),
            "instrumented": sorted(i for i in instrumented if i < len(ends)),
            "series": stats.series(step0_start, t_start, ends, warmup, {"data_wait_s": waits}),
        }
        for rec in doc["steps"]["series"]:
            rec["instrumented"] = rec["index"] in instrumented
        if 0 < len(ends) <= warmup:
            warnings.append(
                f"only {len(ends)} step(s), not more than --warmup {warmup}: statistics include warm-up steps"
            )
        if not ends and outcome.status == "ok":
            warnings.append(
                "no training steps were seen: no torch.optim optimizer stepped; mark steps with gpuopt.step() in loops without an optimizer"
            )
        for p in probes:
            try:
                p.contribute(doc)
            except Exception as exc:
                warnings.append(f"probe {p.name} could not report: {type(exc).__name__}: {exc}")
        attach_window_traces(doc, warnings)
        disp = doc.get("dispatch") or {}
        doc["breakdown"] = stats.breakdown(
            m_times,
            m_waits,
            h2d=[disp.get("h2d_share", 0.0) * t for t in m_times]
            if disp.get("h2d_share")
            else None,
            sync=[disp.get("sync_share", 0.0) * t for t in m_times]
            if disp.get("sync_share")
            else None,
            other_share=disp.get("between_ops_share"),
        )
        doc.pop("_measured_indices", None)
        doc.setdefault("warnings", []).extend(warnings)
        doc["findings"] = evaluate(doc)
        write_profile(doc, self.out / "profile.json")
        return doc


def attach_window_traces(doc: dict[str, Any], warnings: list[str]) -> None:
    """On a GPU run, analyse the torch.profiler window's trace(s) into ``gpu``, ``trace``, tables.

    The same analyses as ``gpuopt report TRACE``; a trace that cannot be read becomes a warning,
    never a lost profile.
    """
    files = doc.get("trace_files") or []
    if not files:
        return
    from gpuopt.assemble.trace_profile import add_trace_to_document  # bridge: dict document

    for f in files:
        try:
            add_trace_to_document(doc, Path(f))
        except GpuoptError as exc:
            warnings.append(f"profiler window trace not analysed: {exc}")


def environment() -> dict[str, Any]:
    """Python, torch, device and GPUs of this process (torch is already imported by now)."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": None,
        "device": "cpu",
        "gpus": [],
        "cpu_count": os.cpu_count() or 1,
        "platform": platform.platform(terse=True),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch"] = getattr(torch, "__version__", None)
        try:
            if torch.cuda.is_available():
                env["gpus"] = [
                    {
                        "name": torch.cuda.get_device_name(i),
                        "memory_bytes": int(torch.cuda.get_device_properties(i).total_memory),
                    }
                    for i in range(torch.cuda.device_count())
                ]
                if torch.cuda.is_initialized():
                    env["device"] = "cuda"
        except Exception:
            pass
    return env
