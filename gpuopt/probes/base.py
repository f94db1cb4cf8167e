"""The probe interface the runner drives.

The runner owns one :class:`RunContext`, starts every probe before the user's script, calls
``on_step`` at each step boundary (an ``optimizer.step()`` or ``gpuopt.step()``), stops them when
the script ends (normally, by exception or by signal), and finally lets each probe ``contribute``
its measurements to the profile document. Probes must be cheap when idle: the whole run's
overhead budget is 3%.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


@dataclass
class RunContext:
    """What a probe may know about the run."""

    script: str  # the script path as the user gave it, or "-m module"
    user_roots: list[Path]  # directories whose files count as "user code" for sites
    out_dir: Path  # the run directory (probes may write extra files there)
    warmup: int = 2  # steps left out of the statistics
    window_start: int = 2  # first step of the detailed-recording window
    window_steps: int = 3  # how many steps the detailed window records
    max_steps: int | None = None  # --steps N
    clock: Any = None  # a callable returning seconds (time.perf_counter; fakes in tests)
    extra: dict[str, Any] = field(default_factory=dict)


class Probe(Protocol):
    name: str

    def start(self, ctx: RunContext) -> None:
        """Called once before the user's code runs."""

    def on_step(self, index: int, t: float) -> None:
        """Called when step ``index`` (0-based) ends at clock time ``t``."""

    def stop(self) -> None:
        """Called once when the user's code has ended, however it ended. Must not raise."""

    def contribute(self, doc: dict[str, Any]) -> None:
        """Write this probe's measurements into the profile document (after all probes stopped)."""
