"""What a ``gpuopt profile`` run measured, as its probes returned it: the assembly's input."""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import Struct, field

if TYPE_CHECKING:  # the probes' types: a run imports the modules of the probes it has, only
    from gpuopt.compile.events import CompileCapture
    from gpuopt.frameworks.detect import FrameworkCapture
    from gpuopt.model.outcome import Outcome
    from gpuopt.model.profile import (
        Environment,
        MemoryReport,
        SlowStep,
        TrainingRecord,
        Utilization,
    )
    from gpuopt.probes.collectives import CollectiveCapture
    from gpuopt.probes.dataloader import DataLoaderWaits
    from gpuopt.probes.own_cost import Spent
    from gpuopt.probes.profiler_window import WindowResult
    from gpuopt.probes.recorder import RecorderCapture


class RunRecord(Struct):
    """One run: who ran, how it ended, and each probe's result (times are the session clock's)."""

    script: str  # as the user gave it, or "-m module"
    argv: list[str]
    cwd: str
    started_at: str  # ISO-8601 UTC
    rank: int | None  # this process's rank under torchrun
    warmup: int
    t_start: float
    t_end: float
    outcome: Outcome
    environment: Environment
    step_ends: list[float]  # clock time at the end of each step
    step_sources: set[str]  # what marked steps: "optimizer.step", "loss.backward", "gpuopt.step"
    instrumented: set[int]  # steps the recorder or the profiler window slowed down
    loaders: DataLoaderWaits | None  # None: the DataLoader probe could not start
    utilization: Utilization | None  # None: the sampler could not report
    recorder: RecorderCapture | None  # None: no recorder ran (--window 0)
    window: WindowResult | None  # None: no GPU profiler window (no CUDA)
    sampler_error: str | None = None
    step_marker: str | None = None  # what marked the last step (the run's step boundary)
    warnings: list[str] = field(default_factory=list)  # probes that failed to start or stop
    training: TrainingRecord | None = None  # --record-losses
    fixes_applied: list[str] = field(default_factory=list)  # --fixes DIR
    collectives: CollectiveCapture | None = None  # one rank of several: its collectives
    memory: MemoryReport | None = None  # --memory-for, or a GPU: the memory probe's result
    compile: CompileCapture | None = None  # what torch.compile did (None: the probe failed)
    framework: FrameworkCapture | None = None  # the training framework seen (None: a plain loop)
    slow_steps: list[SlowStep] | None = None  # steps far slower than the others, named
    spent: Spent | None = None  # gpuopt's own costs (the ``overhead`` key)
