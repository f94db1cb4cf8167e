"""The probe interface the measuring session drives.

The session owns one :class:`RunContext`, starts every probe before the user's script, calls
``on_step`` at each step boundary (an ``optimizer.step()`` or ``gpuopt.step()``) and stops them
when the script ends (normally, by exception or by signal). Each probe then hands back its own
typed result (``DataLoaderProbe.result()``, ``UtilizationSampler.result()``, ...), which the
assembly (:mod:`gpuopt.assemble.run_profile`) turns into the Profile. Probes must be cheap when
idle: the whole run's overhead budget is 3%.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from msgspec import Struct, field

from gpuopt.defaults import WARMUP_STEPS, WINDOW_STEPS

# what ``on_step`` returns when the probe wants no more step boundaries (the step clock then stops
# calling it: a call less in every later step); anything else, None included, asks for more
DONE = "done"


class RunContext(Struct):
    """What a probe may know about the run."""

    script: str  # the script path as the user gave it, or "-m module"
    user_roots: list[Path]  # directories whose files count as "user code" for sites
    out_dir: Path  # the run directory (probes may write extra files there)
    warmup: int = WARMUP_STEPS  # steps left out of the statistics
    window_start: int = WARMUP_STEPS  # first step of the detailed-recording window
    window_steps: int = WINDOW_STEPS  # how many steps the detailed window records
    max_steps: int | None = None  # --steps N
    clock: Callable[[], float] | None = None  # seconds (time.perf_counter; fakes in tests)
    extra: dict[str, Any] = field(default_factory=dict)


class Probe(Protocol):
    """What the session drives. Each probe also has a ``result()`` method returning its own
    typed result (its type differs from probe to probe, so it is not part of this protocol)."""

    name: str
    # A probe whose on_step does nothing says so with a class attribute ``steps_wanted = False``:
    # the session then does not call it at every step boundary.

    def start(self, ctx: RunContext) -> None:
        """Called once before the user's code runs."""

    def on_step(self, index: int, t: float) -> object:
        """Called when step ``index`` (0-based) ends at clock time ``t``; :data:`DONE`: never
        again."""

    def stop(self) -> None:
        """Called once when the user's code has ended, however it ended. Must not raise."""
