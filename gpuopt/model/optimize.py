"""The documents of ``gpuopt optimize``: ``optimize.json`` (schema ``gpuopt.optimize/1``), the
run-time fixes a run applies (``fixes.json``, schema ``gpuopt.fixes/1``), and the training record
a run keeps for verification (``profile.json``'s ``training`` key).

``TrainingRecord`` lives with the profile's records (a profile carries it).
Units are in the names, as in the profile document: ``_s`` seconds, ``steps_per_s`` steps per
second of measured (not warm-up) steps.
"""

from __future__ import annotations

from typing import Literal

from msgspec import UNSET, UnsetType, field

from gpuopt.model.profile import Profile
from gpuopt.model.records import Record, TrainingRecord

OPTIMIZE_SCHEMA = "gpuopt.optimize/1"
FIXES_SCHEMA = "gpuopt.fixes/1"

Verified = Literal["exact", "tolerance", "not-comparable", "failed", "not-run"]
GainVerdict = Literal["faster", "slower", "no-gain", "not-measured"]
# a memory fix's verdict: its peak now within the usable memory where the baseline's was not;
# lower; about the same; higher; no peak on one side (a CPU run without --memory-for measures none)
MemoryVerdict = Literal["fits", "frees", "no-gain", "more", "not-measured"]
# what decided a "tolerance" (or "exact") verdict: identical; the losses within float rounding;
# within the script's own run-to-run difference; within the fix's stated tolerance; the model's
# outputs checked (a model transform); compared after the same samples (other batches)
Bound = Literal["identical", "rounding", "floor", "stated", "transform", "samples", "none"]
FixMode = Literal["runtime", "source", "suggestion"]

__all__ = ["TrainingRecord"]


# what a whole-run gain covers, said beside its size
TRAINING_TIME = "training time: every step, workers' start-up at each epoch included"
WHOLE_STATISTIC = (
    "each run's training wall time per step: the mean of every step, the first (workers "
    "starting) and epoch boundaries included, geometric mean over the runs"
)
# appended to WHOLE_STATISTIC where the runs' pairs measured the gain
# (gpuopt.optimize.measure.speed)
PAIRED = (
    "; the speedup and its interval from the pairs of runs timed in turn (each baseline run over "
    "the candidate run next to it; Student's t, 90%)"
)
# appended after PAIRED where one pair was set apart
SET_APART = "; one pair set apart: its ratio's modified z-score over 3.5 against the others'"


class LoaderSettings(Record):
    """DataLoader arguments to use for the loader built at ``site`` (None: leave as is)."""

    site: str
    num_workers: int | None = None
    persistent_workers: bool | None = None
    prefetch_factor: int | None = None
    pin_memory: bool | None = None
    batch_size: int | None = None  # --fix batch-size (opt-in: it changes the training)
    # the training process's intra-op threads (torch.set_num_threads) beside its workers, where
    # other processes held its cores (None: as the script has them); not a DataLoader keyword
    torch_threads: int | None = None

    def knobs(self) -> dict[str, int | bool]:
        """The settings that are set, by DataLoader keyword."""
        out: dict[str, int | bool] = {}
        keys = ("num_workers", "persistent_workers", "prefetch_factor", "pin_memory", "batch_size")
        for key in keys:
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


class RuntimeFixes(Record):
    """The run-time forms of fixes, as ``gpuopt profile --fixes DIR`` applies them."""

    schema: str = FIXES_SCHEMA
    fixes: list[str] = field(default_factory=list)  # the fix ids these settings come from
    loaders: list[LoaderSettings] = field(default_factory=list)
    non_blocking_sites: list[str] = field(default_factory=list)  # "path:line" of H2D copies
    backend_flags: dict[str, bool] = field(default_factory=dict)  # "torch.backends...": value
    # applied to the model (the module holding the optimizer's parameters) after its first step:
    # "bf16_autocast", "channels_last", "compile"
    model_transforms: list[str] = field(default_factory=list)
    # the user's file -> its rewritten private copy, compiled in its place (optimize's candidate)
    sources: dict[str, str] = field(default_factory=dict)


class RunResult(Record):
    """One run of the script inside ``gpuopt optimize``."""

    label: str  # "baseline 1", "candidate 2", "only dataloader" ...
    role: Literal["baseline", "candidate", "ablation"]
    dir: str  # its run directory, relative to the optimize directory
    fixes: list[str] = field(default_factory=list)
    status: str = "ok"
    exit_code: int = 0
    steps_measured: int = 0
    step_s: list[float] = field(default_factory=list)  # measured steps' times
    steps_per_s: float | None = None  # 1 / median step time
    wall_s: float | None = None
    # a timed run (--measure-only: no recorder, profiler window, sampler) counts in
    # the gains; the profiling run (baseline 1) does not
    timed: bool | UnsetType = UNSET
    warmup_steps: int | UnsetType = UNSET  # leading steps before the run settled (detected)
    warmup_s: float | UnsetType = UNSET  # what they took
    settled: bool | UnsetType = UNSET  # False: it did not settle (warm-up capped at half)
    level_s: float | UnsetType = UNSET  # the median of its settled steps
    extreme_steps: list[int] | UnsetType = UNSET  # indices in step_s of its extreme steps


class Gain(Record):
    """A speed comparison from measured step times, with its noise."""

    speedup: float | None  # candidate steps/s over baseline steps/s (medians)
    low: float | None = None  # the interval's bounds (bootstrap of the ratio of medians)
    high: float | None = None
    noise: float | None = None  # the baseline's own run-to-run spread, as a ratio - 1
    measurable: bool = False  # outside both the interval and the run-to-run spread
    label: str = ""  # "1.84x faster", "no measurable gain", "GPU-only, not measured here"
    # how it was measured and how sure it is
    verdict: GainVerdict | UnsetType = UNSET  # faster, slower, no-gain, not-measured
    statistic: str | UnsetType = UNSET  # what the speedup is a ratio of
    baseline_level_s: float | UnsetType = UNSET  # the baseline's level: its settled steps' median
    candidate_level_s: float | UnsetType = UNSET
    baseline_half_width: float | UnsetType = UNSET  # each side's interval, ± relative to its level
    candidate_half_width: float | UnsetType = UNSET
    runs: list[int] | UnsetType = UNSET  # timed runs: [baseline, candidate]
    # why the measuring stopped: "tight" (each side within ±5%), "far slower" (3 runs a side,
    # over 2x slower), "time budget", "runs cap", "minimum runs" (--quick), "slower" (every fix
    # dropped on its own run), "one run" (a fix alone, measured once)
    stopped: str | UnsetType = UNSET
    # the pairs of runs measured: the one set apart (1-based), far beyond the others' spread
    # (gpuopt.stats.outliers), and its ratio; the gain and interval are the others'
    set_apart_pair: int | UnsetType = UNSET
    set_apart_ratio: float | UnsetType = UNSET


class MemoryChange(Record):
    """What a fix judged by memory (``accumulation``) did to the step's peak: the baseline's
    profile against the candidate's memory run, the same source on both sides (``measured`` on
    a GPU, else ``predicted`` under fake tensors for ``device``)."""

    verdict: MemoryVerdict
    label: str  # "peak 1.20 GiB -> 412 MiB (-66%), predicted for h100"
    before_bytes: int | None = None
    after_bytes: int | None = None
    freed_share: float | None = None  # (before - after) / before
    usable_bytes: int | None = None  # the device's memory less the margin (None: no budget)
    source: str = ""  # "measured" or "predicted"
    device: str | None = None


class FixResult(Record):
    """One fix: how it reached the run, what it changed, whether it held, what it bought."""

    id: str
    mode: FixMode
    applied: bool
    diff: str = ""  # the source changes as a unified diff ("" for run-time fixes)
    gain: float | None = None  # its measured speedup alone (ablation), None when not measured
    verified: Verified = "not-run"
    reason: str = ""
    findings: list[str] = field(default_factory=list)  # finding ids that called for it
    sites: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)  # what it changed, one line each
    skipped: list[str] = field(default_factory=list)  # what it left alone and why
    settings: dict[str, int | float | bool | str] = field(default_factory=dict)
    gain_detail: Gain | UnsetType = UNSET
    opt_in: bool = False
    gpu_only: bool = False
    expected: str = ""  # a suggestion's expected effect, said as an expectation
    notes: list[str] = field(default_factory=list)  # what else the user should know
    # a fix judged by the memory it frees: the step's peak before and after (its gain_detail is
    # then the samples/s it costs)
    memory: MemoryChange | UnsetType = UNSET


class Verification(Record):
    """Whether the candidate trains as the baseline did."""

    verified: Verified
    detail: str
    floor: float | None = None  # the baseline's own run-to-run loss difference (max abs)
    max_loss_diff: float | None = None
    steps_compared: int = 0
    loss_scale: float | None = None  # the largest baseline loss (differences are relative to it)
    bound: Bound | UnsetType = UNSET  # which bound decided the verdict
    baseline_runs: int | UnsetType = UNSET  # the baseline runs the floor came from


class OptimizeDocument(Record):
    """``DIR/optimize.json``."""

    schema: str = OPTIMIZE_SCHEMA
    status: Literal["ok", "error", "planned"] = "ok"
    script: str = ""
    argv: list[str] = field(default_factory=list)
    steps: int = 0  # training steps each run made
    seed: int | None = None
    baseline: Profile | None = None
    candidate: Profile | None = None
    speedup: float | None = None
    gain: Gain | None = None
    verification: Verification | None = None
    fixes: list[FixResult] = field(default_factory=list)
    runs: list[RunResult] = field(default_factory=list)
    diff: str = ""  # every source change, one unified diff
    cost_s: float | None = None  # what optimize itself took, wall clock
    time_budget_s: float | UnsetType = UNSET  # the measuring's time cap (--time-budget)
    warnings: list[str] = field(default_factory=list)
