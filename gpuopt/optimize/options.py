"""``gpuopt optimize``'s options, as the command line gives them (:mod:`gpuopt.commands.optimize`
runs them; :mod:`gpuopt.optimize.run.analyses` reads them too)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuopt.defaults import OPTIMIZE_SEED, OPTIMIZE_STEPS


@dataclass
class OptimizeOptions:
    script: str | None
    module: str | None
    args: list[str]
    out: Path | None = None
    steps: int = OPTIMIZE_STEPS
    warmup: int = 2
    seed: int = OPTIMIZE_SEED
    fixes: list[str] = field(default_factory=list)
    amp_dtype: str = "auto"  # --fix amp: bf16, fp16 (loss-scaled), auto (bf16 where supported)
    apply: bool = False
    write: bool = False
    diff: bool = True  # --no-diff: nothing on stdout
    baseline: Path | None = None
    measure: bool = True
    quick: bool = False
    quiet: bool = False
    force: bool = False
    timeout_s: float | None = None
    time_budget_s: float | None = None  # --time-budget: the measuring's cap (None: the default)
    memory_for: str | None = None  # --memory-for: every run predicts memory for that device
