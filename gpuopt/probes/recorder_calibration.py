"""What the recorder itself costs per op, measured in the same process at the end of the run.

A Python dispatch mode costs time of its own (tens of microseconds per op), and that time lands
between ops and inside the op timers of the window it records. To report honest op times and an
honest "share of step time between ops", every run measures the cost on this machine, with this
torch, and subtracts it:

* ``function_us``: one recorded Python-level tensor call (``__torch_function__`` layer, with the
  stack walk to the user frame);
* ``dispatch_us``: one recorded aten op (dispatch layer);
* ``passthrough_us``: one metadata call (``x.shape``) passed through unrecorded;
* ``inflation_us``: how much longer an op looks from inside the recorder than the same call costs
  without it (the correction applied to op times).

Each is the minimum over a few repetitions of a loop of cheap CPU calls, timed with and without
the recorder side by side (so machine load affects both alike). It runs after the user's code has
finished, so it never disturbs the steps it corrects.
"""

from __future__ import annotations

import time
from typing import Any

_N = 100
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


def calibrate(n: int = _N, reps: int = _REPS) -> dict[str, float]:
    """Per-call costs of the recorder in microseconds (see the module docstring)."""
    import torch

    from gpuopt.probes.recorder import RecorderEngine
    from gpuopt.probes.sites import SiteResolver

    x = torch.ones(4, 4)
    resolver = SiteResolver([], extra_user_files=(__file__,))

    def timed(fn: Any, modes: str | None) -> tuple[float, float]:
        """Best wall time per call, and (with the dispatch mode) the op time seen inside."""
        best, inside = float("inf"), 0.0
        for _ in range(reps):
            engine = RecorderEngine(resolver, cpu_only=True) if modes else None
            if engine is not None:
                engine.turn_on(function=True, dispatch=modes == "both", patch_sync=False)
            try:
                wall = fn(x, n)
            finally:
                if engine is not None:
                    engine.turn_off()
            if wall < best:
                best = wall
                if engine is not None and engine.acc.ops:
                    inside = engine.acc.op_s / engine.acc.ops
        return best / n, inside

    fn_index = _loop_index
    timed(fn_index, None)  # warm-up: first calls allocate and fill caches
    base, _ = timed(fn_index, None)
    tf_only, _ = timed(fn_index, "function")
    both, inside = timed(fn_index, "both")
    shape_base, _ = timed(_loop_shape, None)
    shape_tf, _ = timed(_loop_shape, "function")
    us = 1e6
    return {
        "function_us": max(tf_only - base, 0.0) * us,
        "dispatch_us": max(both - tf_only, 0.0) * us,
        "passthrough_us": max(shape_tf - shape_base, 0.0) * us,
        "inflation_us": (inside - base) * us,
        "op_us_without_recorder": base * us,
        "op_us_with_recorder": both * us,
    }
