"""Multi-stream or one stream: which plan ``schedule`` hands back, and how it decided.

A multi-stream CUDA graph pays for its concurrency with cross-stream edges (fork, join, one per
sync) and with kernels that share the GPU; on a chain-like model it can be slower than the same
kernels on one stream (``resnet_stage`` on an H200: 0.385 ms multi-stream against 0.313 ms one
stream, tests/data/shared/gpu-h200/README.md). So ``schedule`` never hands back a plan slower
than the one-stream graph of the same model:

* **on the device** (CUDA inputs, CUDA graphs): both graphs are captured and replayed in
  alternated rounds, timed with CUDA events; the multi-stream plan is kept only when the median
  of its per-round ratios to the one-stream graph is below :data:`MEASURED_MARGIN` (a gain
  within 2% is not worth the extra streams): ``by: "measured"``;
* **without one** (CPU inputs, or no graph): the cost model (:mod:`gpuopt.aot.simulate`) must
  promise at least :data:`MIN_ESTIMATED_GAIN` over one stream: ``by: "cost-model"``. The model
  overestimated the multi-stream gain on every zoo model measured on the H200, by 1.20x to 1.36x
  (:data:`H200_CHECK`; the estimates are the ``h100`` profile's), so a smaller promise may be a
  loss;
* a plan with one stream needs no choice: ``by: "one stream planned"``.

The decisions are pure functions over numbers; :func:`choose_plan` applies them to a plan (the
CUDA capture and timing, :func:`gpuopt.aot.executor_cuda.time_alternated`, behind two small
functions tests replace).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from gpuopt.aot.capture import Program
    from gpuopt.aot.plan import Plan

MULTI = "multi-stream"
ONE = "one-stream"

# (model, cost-model multi-stream over one graph on the h100 profile, measured on the H200):
# docs/bench-aot.md's estimates against tests/data/shared/gpu-h200/README.md's CUDA-event medians.
H200_CHECK: tuple[tuple[str, float, float], ...] = (
    ("inception_v3", 1.98, 1.762 / 1.208),
    ("nasnet_a_mobile", 3.36, 2.376 / 0.935),
    ("resnet_stage", 1.02, 0.313 / 0.385),
    ("transformer_block", 1.22, 0.245 / 0.241),
)
# above the largest overestimate seen (estimate / measured: 1.357, inception_v3)
MIN_ESTIMATED_GAIN = 1.4
MEASURED_MARGIN = 0.98


@dataclass(frozen=True)
class StreamChoice:
    """Which plan was chosen, by what, with the numbers it was chosen on (seconds)."""

    chosen: str  # MULTI or ONE
    by: str  # "measured", "cost-model", "one stream planned", "asked"
    multi_s: float | None = None  # the multi-stream graph: median measured, or estimated
    one_s: float | None = None  # the one-stream graph, the same way
    streams_planned: int = 1  # streams of the multi-stream plan
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "chosen": self.chosen,
            "by": self.by,
            "multi_stream_s": self.multi_s,
            "one_stream_s": self.one_s,
            "streams_planned": self.streams_planned,
            "reason": self.reason,
        }

    def says(self) -> str:
        """One line for the command's output and the plan's notes."""
        return f"{self.chosen} graph, chosen by {self.by}: {self.reason}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def single_planned() -> StreamChoice:
    return StreamChoice(ONE, "one stream planned", reason="the plan has one stream")


def asked(streams: str, planned: int) -> StreamChoice:
    """The caller named the plan (``streams="multi"`` or ``"one"``)."""
    chosen = MULTI if streams == "multi" and planned > 1 else ONE
    return StreamChoice(chosen, "asked", streams_planned=planned, reason=f"streams={streams!r}")


def by_estimate(multi_s: float, one_s: float, planned: int) -> StreamChoice:
    """The cost model's times of the two graphs (an estimate, said so)."""
    gain = one_s / multi_s if multi_s > 0 else 0.0
    keep = gain >= MIN_ESTIMATED_GAIN
    cmp = "at least" if keep else "below"
    reason = (
        f"estimated {gain:.2f}x over one stream ({_ms(multi_s)} vs {_ms(one_s)}, an estimate), "
        f"{cmp} the {MIN_ESTIMATED_GAIN:.2f}x the cost model must promise (it overestimated "
        "the gain by up to 1.36x on the H200)"
    )
    return StreamChoice(MULTI if keep else ONE, "cost-model", multi_s, one_s, planned, reason)


def by_measurement(multi: Sequence[float], one: Sequence[float], planned: int) -> StreamChoice:
    """Alternated rounds on the device: ``multi[i]`` and ``one[i]`` timed in round ``i``."""
    if not multi or len(multi) != len(one) or min(one) <= 0:
        raise ValueError("by_measurement needs one time of each graph per round")
    ratio = median(m / o for m, o in zip(multi, one, strict=True))
    keep = ratio < MEASURED_MARGIN
    reason = (
        f"measured {median(multi) * 1e3:.3f} ms multi-stream vs {median(one) * 1e3:.3f} ms one "
        f"stream (median of {len(multi)} alternated rounds; multi/one {ratio:.3f}"
        + (")" if keep else f", not below {MEASURED_MARGIN})")
    )
    return StreamChoice(
        MULTI if keep else ONE, "measured", median(multi), median(one), planned, reason
    )


def choose_plan(
    program: Program,
    plan: Plan,
    leaves: Sequence[Any],
    *,
    streams: str,
    cuda_graph: bool,
    warmup: int,
    device_profile: str,
) -> tuple[Plan, Any]:
    """``plan`` or its one-stream copy (:mod:`gpuopt.aot.choice`), with ``.choice`` set on the
    one handed back; and, when the choice was measured, the chosen plan's captured CUDA runner
    (the caller keeps it: no second capture)."""
    import torch

    device = next((x.device for x in leaves if isinstance(x, torch.Tensor)), torch.device("cpu"))
    planned = plan.num_streams
    one = plan.one_stream("")
    runners: tuple[Any, Any] | None = None
    if planned <= 1:
        decided = single_planned()
    elif streams != "auto":
        decided = asked(streams, planned)
    elif device.type == "cuda" and cuda_graph:
        runners = _captured(program, (plan, one), leaves, device, warmup)
        with torch.no_grad():
            multi_t, one_t = time_alternated_graphs([r.graph for r in runners])
        decided = by_measurement(multi_t, one_t, planned)
    else:
        from gpuopt.aot.costmodel import get_profile
        from gpuopt.aot.simulate import estimate

        est = estimate(plan, get_profile(device_profile))
        decided = by_estimate(est.multistream_s, est.graph_s, planned)
    k = 0 if decided.chosen == MULTI else 1
    chosen = (plan, one)[k] if planned > 1 else plan
    chosen.choice = decided.to_dict()
    chosen.notes.append(decided.says())
    return chosen, runners[k] if runners is not None else None


def _captured(
    program: Program, plans: tuple[Plan, Plan], leaves: Sequence[Any], device: Any, warmup: int
) -> tuple[Any, Any]:
    """A CUDA runner per plan, each captured on ``leaves`` (GPU-only)."""
    import torch

    from gpuopt.aot.executor_cuda import CudaPlanRunner

    runners = tuple(
        CudaPlanRunner(program, p, device, use_graph=True, warmup=warmup) for p in plans
    )
    with torch.no_grad():
        for r in runners:
            r.capture(leaves)
    return runners[0], runners[1]


def time_alternated_graphs(graphs: Sequence[Any]) -> list[list[float]]:
    """:func:`gpuopt.aot.executor_cuda.time_alternated` (GPU-only; tests replace this)."""
    from gpuopt.aot.executor_cuda import time_alternated

    return time_alternated(graphs)


__all__ = [
    "H200_CHECK",
    "MEASURED_MARGIN",
    "MIN_ESTIMATED_GAIN",
    "MULTI",
    "ONE",
    "StreamChoice",
    "asked",
    "by_estimate",
    "by_measurement",
    "choose_plan",
    "single_planned",
]
