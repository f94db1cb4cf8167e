"""What the recorder itself costs, so the window's times can be corrected for it.

A Python mode costs time of its own, and that time lands between ops and inside the op timers
of the window it records. The recorder measures most of its cost directly: its handlers time
their own Python code on every call (``own_tf_s``/``own_dispatch_s`` in the step counters). What
a handler cannot time is the price of being called at all: PyTorch entering a Python mode for a
call (argument wrapping, popping and pushing the mode stack). That price does not depend on the
user's code, so it is measured here, at the end of every run, in the same process:

* ``function_entry_us``: entering an empty ``TorchFunctionMode`` for one call;
* ``dispatch_entry_us``: entering an empty ``TorchDispatchMode`` for one op (wrapped by torch in
  ``torch._dynamo.disable`` exactly when the recorder's own mode is);
* ``passthrough_us``: one metadata read (``x.shape``) passed through the recorder unrecorded;
* ``inflation_us``: how much longer an op looks from inside the recorder than the same call
  costs without it (the correction applied to op times);
* ``op_us_without_recorder`` / ``op_us_with_recorder``: a trivial op called from user code,
  without and with the recorder: the simplest per-op cost, for reference.

Each is the minimum over a few repetitions of a loop of cheap CPU calls, timed with and without
the layer side by side, the setups' repetitions interleaved: a slow stretch of those
milliseconds (the other vCPU of a hyperthread pair busy) then slows every setup alike, where
back-to-back repetitions of one setup would double all of its minimums. It runs after the
user's code has finished, so it never disturbs the steps it corrects, and costs 10-15 ms (part
of the ``overhead`` key's ``end_s``).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from msgspec import Struct

_N = 100
# minimums of 3 repetitions: 12 ms a run, within 2% of 7's (25 ms) on 8 calibrations at load 5,
# one passthrough of the 8 at +20%
_REPS = 3


def _loop_index(x: Any, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        x[0]
    return time.perf_counter() - t0


def _loop_shape(x: Any, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        x.shape  # noqa: B018  (the attribute read is what is timed)
    return time.perf_counter() - t0


def _empty_modes() -> tuple[type, type]:
    from torch.overrides import TorchFunctionMode

    from gpuopt.torch_compat import TorchDispatchMode

    class EmptyFunction(TorchFunctionMode):
        def __torch_function__(
            self,
            func: Any,
            types: Any,
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            return func(*args, **(kwargs or {}))

    class EmptyDispatch(TorchDispatchMode):  # type: ignore[no-untyped-call]
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return "torch._dynamo" in sys.modules  # as the recorder's own mode decides

        def __torch_dispatch__(
            self,
            func: Any,
            types: Any,
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            return func(*args, **(kwargs or {}))

    return EmptyFunction, EmptyDispatch


class Calibration(Struct, frozen=True):
    """The recorder's per-call costs in microseconds (see the module docstring)."""

    function_entry_us: float
    dispatch_entry_us: float
    passthrough_us: float
    inflation_us: float
    op_us_without_recorder: float
    op_us_with_recorder: float

    @property
    def trivial_op_us(self) -> float:
        """What the recorder adds to the simplest op called from user code."""
        return self.op_us_with_recorder - self.op_us_without_recorder


def calibrate(n: int = _N, reps: int = _REPS) -> Calibration:
    """Per-call costs in microseconds (see the module docstring)."""
    import torch

    from gpuopt.probes.recorder_engine import RecorderEngine
    from gpuopt.sites import SiteResolver

    x = torch.ones(4, 4)
    resolver = SiteResolver([], extra_user_files=(__file__,))
    empty_function, empty_dispatch = _empty_modes()

    def once(loop: Any, setup: str) -> tuple[float, float]:
        """One repetition: wall time per call, and (for the recorder) the op time it saw inside."""
        engine = None
        modes: list[Any] = []
        if setup == "empty-function":
            modes = [empty_function()]
        elif setup == "empty-both":
            modes = [empty_dispatch(), empty_function()]
        elif setup in ("recorder", "recorder-function"):
            engine = RecorderEngine(resolver, cpu_only=True)
            engine.turn_on(function=True, dispatch=setup == "recorder", patch_sync=False)
        for m in modes:
            m.__enter__()
        try:
            wall = loop(x, n)
        finally:
            for m in reversed(modes):
                m.__exit__(None, None, None)
            if engine is not None:
                engine.turn_off()
        inside = engine.acc.op_s / engine.acc.ops if engine is not None and engine.acc.ops else 0.0
        return wall / n, inside

    once(_loop_index, "recorder")  # warm-up: first calls allocate and fill caches
    setups = [
        (_loop_index, "none"),
        (_loop_index, "empty-function"),
        (_loop_index, "empty-both"),
        (_loop_index, "recorder"),
        (_loop_shape, "none"),
        (_loop_shape, "recorder-function"),
    ]
    best = [(float("inf"), 0.0)] * len(setups)
    for _ in range(reps):  # interleaved: a slow stretch of the machine slows one rep of each
        for i, (loop, setup) in enumerate(setups):
            got = once(loop, setup)
            if got[0] < best[i][0]:
                best[i] = got
    (base, _), (function_only, _), (both, _), (recorded, inside) = best[:4]
    (shape_base, _), (shape_pass, _) = best[4:]
    us = 1e6
    return Calibration(
        function_entry_us=max(function_only - base, 0.0) * us,
        dispatch_entry_us=max(both - function_only, 0.0) * us,
        passthrough_us=max(shape_pass - shape_base, 0.0) * us,
        inflation_us=(inside - base) * us,
        op_us_without_recorder=base * us,
        op_us_with_recorder=recorded * us,
    )
