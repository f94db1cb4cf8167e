"""Peak memory against batch size: a straight line through the replays, the largest batch that
fits, and what limits it (pure functions).

A training step's peak is the model's states (parameters, gradients, optimizer state: the same
at any batch size) plus what the batch makes (activations and their gradients: proportional to
the batch size at fixed sample shapes). Two replays give the line
``peak = fixed + per_sample * batch``; the largest batch that fits is the largest ``b`` with
``fixed + per_sample * b <= capacity * (1 - margin)``. :func:`refine` takes a replay at that
batch size as a check and, when it disagrees, draws the line again through the two closest
points.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuopt.model.records import MemoryByCategory
from gpuopt.units import fmt_bytes, fmt_count, fmt_frac


@dataclass(frozen=True)
class Line:
    """``peak = fixed + per_sample * batch`` (bytes)."""

    fixed: float
    per_sample: float

    def at(self, batch: int) -> float:
        return self.fixed + self.per_sample * batch


def line_through(points: list[tuple[int, int]]) -> Line | None:
    """The line through the two points of different batch size that are farthest apart (None
    with fewer than two distinct batch sizes)."""
    by_batch = dict(sorted(points))
    if len(by_batch) < 2:
        return None
    (b0, p0), (b1, p1) = min(by_batch.items()), max(by_batch.items())
    slope = (p1 - p0) / (b1 - b0)
    return Line(fixed=p0 - slope * b0, per_sample=slope)


def budget(capacity: int, margin: float) -> int:
    """The bytes a step may use: the capacity less the margin."""
    return int(capacity * (1.0 - margin))


def max_batch(line: Line, capacity: int, margin: float) -> int | None:
    """The largest batch size whose peak fits the budget: 0 when none does (a peak that does not
    grow with the batch but is over the budget fits at no batch size either), None when the
    peak does not grow with the batch and fits (then any batch fits that the rest of the step
    allows)."""
    room = budget(capacity, margin) - line.fixed
    if line.per_sample <= 0:
        return None if room >= 0 else 0
    return max(int(math.floor(room / line.per_sample)), 0)


def refine(points: list[tuple[int, int]], capacity: int, margin: float) -> Line | None:
    """The line through the two replays that bracket the budget most tightly (or the two
    nearest it), so that a replay at the predicted batch size that disagrees corrects it."""
    by_batch = dict(sorted(points))
    if len(by_batch) < 2:
        return None
    limit = budget(capacity, margin)
    below = [(b, p) for b, p in by_batch.items() if p <= limit]
    above = [(b, p) for b, p in by_batch.items() if p > limit]
    if below and above:
        pair = [max(below), min(above)]
    else:
        pair = sorted(by_batch.items(), key=lambda bp: abs(bp[1] - limit))[:2]
    return line_through(pair)


def limit_text(
    batch: int | None,
    split: MemoryByCategory | None,
    line: Line | None,
    capacity: int,
    margin: float,
    best: int | None,
) -> str:
    """What limits the batch size, in one sentence."""
    usable = budget(capacity, margin)
    states = 0
    if split is not None:
        states = split.parameters + split.gradients + split.optimizer_state
    if line is None:
        return "the batch size is not known: no line of memory against batch size"
    if best is None:
        return (
            "the peak does not grow with the batch size in the replays: memory does not limit "
            "it here"
        )
    if line.fixed >= usable:
        return (
            "does not fit at any batch size: "
            f"the memory that does not grow with the batch ({fmt_bytes(line.fixed)}: model "
            f"states {fmt_bytes(states)}) alone fills the {fmt_bytes(usable)} usable "
            f"({fmt_frac(1 - margin, 0)} of {fmt_bytes(capacity)}): no batch size fits; shard or "
            "shrink the model states (8-bit optimizer states, FSDP/ZeRO, bf16 weights)"
        )
    grows = f"{fmt_bytes(line.per_sample)} a sample"
    if best <= 0:
        return (
            f"does not fit at any batch size: one sample's activations and their gradients "
            f"({grows}) on top of the {fmt_bytes(line.fixed)} that does not grow pass the "
            f"{fmt_bytes(usable)} usable ({fmt_frac(1 - margin, 0)} of {fmt_bytes(capacity)})"
        )
    at = (
        f"at batch {fmt_count(best)}, {fmt_frac(line.per_sample * best / max(line.at(best), 1))} "
        "of the peak grows with the batch"
    )
    return (
        f"activations and their gradients: {grows} ({at}); the model states and what else "
        f"does not grow take {fmt_bytes(line.fixed)}"
    )
