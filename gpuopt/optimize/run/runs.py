"""The runs of ``gpuopt optimize``: the script under ``gpuopt profile`` in a child process, with the
same steps and seed each time, its losses recorded, and the run-time fixes (``--fixes``) of the
run patched in. Each run's stdout and stderr are kept in its directory (the sync fix must leave
what the script prints unchanged, and a failed run shows its own error).

Every run but the profile the fixes are planned from is *timed*: ``--measure-only`` (the step
clock, the losses, the DataLoader probe and the batch shapes; no recorder window, profiler window,
sampler thread or checkpoint), so both sides carry the same light instrumentation. A timed run's
steps are split into its warm-up and settled steps (:mod:`gpuopt.optimize.measure.step_series`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gpuopt import inputs
from gpuopt.debug import PREFIX, logger
from gpuopt.errors import GpuoptError
from gpuopt.model.document import load_profile
from gpuopt.model.optimize import RunResult
from gpuopt.model.profile import Profile
from gpuopt.script import interrupts

log = logger(__name__)


@dataclass
class RunSpec:
    """One run: who it is, which fixes it carries (``fixes_dir`` holds their ``fixes.json``)."""

    label: str
    role: Literal["baseline", "candidate", "ablation"]
    dir: Path
    fixes: list[str] = field(default_factory=list)
    fixes_dir: Path | None = None
    base: Path | None = None  # the optimize directory: run directories are written relative to it
    timed: bool = True  # --measure-only; False: the profile the fixes are planned from


@dataclass
class Launch:
    """What every run shares: the target command line, steps, seed."""

    script: str | None
    module: str | None
    args: list[str]
    steps: int
    warmup: int
    seed: int
    timeout_s: float | None = None
    memory_for: str | None = None  # --memory-for DEVICE|SIZE, for every run alike

    def command(self, spec: RunSpec) -> list[str]:
        cmd = [sys.executable, "-m", "gpuopt", "profile", "--quiet", "--force", "--record-losses"]
        cmd += ["-o", str(spec.dir), "--steps", str(self.steps), "--warmup", str(self.warmup)]
        cmd += ["--seed", str(self.seed)]
        if spec.timed:
            cmd.append("--measure-only")
        elif self.memory_for is not None:  # a timed run predicts nothing
            cmd += ["--memory-for", self.memory_for]
        if spec.fixes_dir is not None:
            cmd += ["--fixes", str(spec.fixes_dir)]
        if self.module is not None:
            return [*cmd, "-m", self.module, *self.args]
        assert self.script is not None
        return [*cmd, "--", self.script, *self.args]


@dataclass
class Done:
    """A finished run: its summary and, when it wrote one, its profile."""

    result: RunResult
    profile: Profile | None
    stdout: str
    stderr_tail: str
    dir: Path | None = None  # the run directory (its other files: transform_check.json)

    def samples_per_step(self) -> float | None:
        """The mean samples per step (its ``ragged`` record), if known."""
        from gpuopt.model.records import given
        from gpuopt.optimize.measure.verify import samples_per_step

        ragged = given(self.profile.ragged) if self.profile is not None else None
        if ragged is None:
            return None
        return samples_per_step(given(ragged.samples), ragged.steps_observed)

    def transform_check(self) -> dict[str, object] | None:
        """What the model transforms' check wrote in this run, if it ran."""
        import json

        path = self.dir / "transform_check.json" if self.dir is not None else None
        if path is None or not path.exists():
            return None
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else None


def run_step_times(profile: Profile) -> list[float]:
    """Every step of the run, in seconds, but the first (it spans the script's own start-up:
    imports, building the model) and those the recorder slowed down (none in a timed run). The
    warm-up is found in what is left (:func:`gpuopt.optimize.measure.step_series.split_run`)."""
    return [
        s.time_s
        for s in profile.steps.series
        if s.index > 0 and s.instrumented is not True and s.time_s > 0
    ]


def run_training_times(profile: Profile) -> list[float]:
    """Every step of the run in seconds, the first included: it starts at the first
    ``iter()``/``next()`` on a DataLoader (the workers starting), so that their sum is the
    training's wall time from its first step to its last, epoch boundaries included (steps the
    recorder slowed: none in a timed run, left out)."""
    return [s.time_s for s in profile.steps.series if s.instrumented is not True and s.time_s > 0]


def run_once(launch: Launch, spec: RunSpec) -> Done:
    """Run the script once under ``gpuopt profile``; never raises for the script's own failure
    (the result says how it ended), only when gpuopt itself cannot run it."""
    spec.dir.mkdir(parents=True, exist_ok=True)
    out_path, err_path = spec.dir / "stdout.txt", spec.dir / "stderr.txt"
    for path in (out_path, err_path):  # a link left there to the script is not written through
        inputs.refuse(path)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    log.debug("run %s: %s (its stderr: %s)", spec.label, launch.command(spec), err_path)
    t0 = time.perf_counter()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = interrupts.run(
            launch.command(spec),
            launch.timeout_s,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        code = 124 if proc is None else proc.returncode
    wall = time.perf_counter() - t0
    stdout = out_path.read_text(errors="replace")
    stderr_tail = _tail(err_path.read_text(errors="replace"))
    profile: Profile | None = None
    try:
        profile = load_profile(spec.dir)
    except GpuoptError as exc:
        log.debug("run %s: no profile: %s", spec.label, exc)
        profile = None
    shown = spec.dir.relative_to(spec.base) if spec.base is not None else spec.dir
    result = RunResult(label=spec.label, role=spec.role, dir=str(shown), fixes=list(spec.fixes))
    result.exit_code = code
    result.wall_s = round(wall, 3)
    if profile is None:
        result.status = "error"
    else:
        result.status = profile.status
        times = run_step_times(profile)
        result.step_s = [round(t, 6) for t in times]
        result.steps_measured = len(times)
        _split(result, times)
    result.timed = spec.timed
    return Done(result, profile, stdout, stderr_tail, spec.dir)


def _split(result: RunResult, times: list[float]) -> None:
    """The run's warm-up, settled level and extreme steps; its steps/s is 1 / that level."""
    from gpuopt.optimize.measure.step_series import split_run

    split = split_run(times)
    if split.level is None or split.level <= 0:
        return
    result.steps_per_s = round(1.0 / split.level, 4)
    result.warmup_steps, result.warmup_s = split.warmup, round(split.warmup_s, 6)
    result.settled, result.level_s = split.did_settle, round(split.level, 7)
    result.extreme_steps = list(split.extreme)


def timed(runs: list[Done], role: str) -> list[Done]:
    """The timed runs of a role that wrote a profile (their steps count in the gains)."""
    return [
        d
        for d in runs
        if d.result.role == role and d.profile is not None and d.result.timed is not False
    ]


def _tail(text: str, lines: int = 3) -> str:
    kept = [
        ln
        for ln in text.strip().splitlines()
        if not ln.startswith(("gpuopt: profile written", PREFIX))  # PREFIX: --debug's lines
    ]
    return "\n".join(kept[-lines:])
