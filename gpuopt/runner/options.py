"""``gpuopt profile``'s options, as both entry paths (typer's and gpuopt.entry's) build them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuopt.defaults import SAMPLE_INTERVAL_S, WARMUP_STEPS, WINDOW_STEPS


@dataclass
class ProfileOptions:
    script: str | None
    module: str | None
    args: list[str]
    out: Path | None = None
    steps: int | None = None
    warmup: int = WARMUP_STEPS
    window: int = WINDOW_STEPS
    sample_interval: float = SAMPLE_INTERVAL_S
    nproc_per_node: int | None = None
    quiet: bool = False
    fmt: str = "text"
    force: bool = False  # replace an earlier run's profile in --out DIR
    fixes: Path | None = None  # --fixes DIR: run-time fixes (gpuopt optimize --apply) patched in
    seed: int | None = None  # --seed N: random, numpy and torch seeded before the script runs
    record_losses: bool = False  # --record-losses: every step's loss and a parameter digest

    @property
    def warmup_used(self) -> int:
        """The warm-up the run uses: ``--warmup``, but with ``--steps N`` at most ``N - 1``, so
        that the recorder's window still records a training step."""
        if self.steps is not None and self.window > 0:
            return max(min(self.warmup, self.steps - 1), 0)
        return self.warmup
