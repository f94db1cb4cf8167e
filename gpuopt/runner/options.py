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
