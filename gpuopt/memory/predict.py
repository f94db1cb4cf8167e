"""``memory.predicted``: the recorded step replayed under fake tensors at the script's batch size
and at twice it, the line through the two peaks, the largest batch that fits the device with the
margin, checked by a replay at that batch size (and corrected, at most twice), all within a time
budget: the first replay always runs, each later one only when the time spent so far and one
more replay (as long as the longest so far) stay within it.

A replay at another batch size resizes the batch dimension of every tensor that comes from
outside the program; when the script wrote the batch size into a call (``out.view(64, -1)``),
the replay fails and is tried again with every integer equal to the batch size replaced by the
new one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuopt.memory.capture import CapturedStep
from gpuopt.memory.fit import Line, budget, limit_text, line_through, max_batch, refine
from gpuopt.memory.replay import ReplayError, ReplayOptions, ReplayResult, fake_device_for, replay
from gpuopt.memory.tracker import CUDA_BLOCK
from gpuopt.model.records import MemoryPoint, MemoryPredicted
from gpuopt.sites import SiteResolver
from gpuopt.units import fmt_bytes

MAX_CHECKS = 3  # replays at the predicted batch size (the first check and two corrections)

Replayer = Callable[[CapturedStep, ReplayOptions], ReplayResult]


@dataclass
class PredictInput:
    step: CapturedStep
    capacity: int | None  # the device's bytes (None: no device named, no GPU)
    margin: float
    budget_s: float
    resolver: SiteResolver | None = None
    capability: tuple[int, int] | None = None  # the named card's (None: the GPU here, or Hopper)
    replayer: Replayer = replay
    clock: Callable[[], float] = time.perf_counter


@dataclass
class _State:
    inp: PredictInput
    t0: float
    longest: float = 0.0
    substitute: bool = False  # the replays need the batch size's integers replaced
    points: dict[int, ReplayResult] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    skipped: int = 0

    def time_left(self) -> bool:
        spent = self.inp.clock() - self.t0
        return spent + self.longest <= self.inp.budget_s

    def run(self, batch: int | None) -> ReplayResult | None:
        """A replay at ``batch`` (plain, then with the integers replaced); None when it failed
        or the budget is spent."""
        if batch is not None and batch in self.points:
            return self.points[batch]
        if self.points and not self.time_left():
            self.skipped += 1
            return None
        modes = [True] if self.substitute else [False, True]
        if batch is None or batch == self.inp.step.batch_size:
            modes = [False]
        error = ""
        for subst in modes:
            t = self.inp.clock()
            try:
                r = self.inp.replayer(
                    self.inp.step,
                    ReplayOptions(
                        batch,
                        substitute_ints=subst,
                        resolver=self.inp.resolver,
                        capability=self.inp.capability,
                    ),
                )
            except ReplayError as exc:
                error = str(exc)
                continue
            finally:
                self.longest = max(self.longest, self.inp.clock() - t)
            self.substitute = subst
            if batch is not None:
                self.points[batch] = r
            return r
        self.notes.append(f"the replay at batch {batch} failed: {error}")
        return None


def predict(inp: PredictInput) -> MemoryPredicted:
    """The prediction (an estimate; see the module doc)."""
    st = _State(inp, inp.clock())
    step = inp.step
    b0 = step.batch_size
    try:
        first = inp.replayer(
            step,
            ReplayOptions(b0, resolver=inp.resolver, capability=inp.capability, count_flops=True),
        )
    except ReplayError as exc:
        return _failed(inp, str(exc), st)
    finally:
        st.longest = st.inp.clock() - st.t0
    if b0 is not None:
        st.points[b0] = first
    line = _line(st, b0)
    best = _check(st, line) if line is not None and inp.capacity is not None else None
    if line is not None and best is None and inp.capacity is not None:
        best = max_batch(line, inp.capacity, inp.margin)
    return _record(st, first, _final_line(st, line), best)


def _final_line(st: _State, line: Line | None) -> Line | None:
    """The line the largest batch was found on: after the checks, through the replays that
    bracket the budget (a step whose peak at small batches is its optimizer step, not its
    activations, draws a first line far too flat: timm's resnet18 at batch 8 and 16 read 48 KiB
    a sample, 1.74 MiB at batch 42,014), so that the per-sample figure, the fixed part and what
    limits the batch say one thing."""
    inp = st.inp
    if line is None or inp.capacity is None or len(st.points) <= 2:
        return line
    return refine([(b, r.peak_bytes) for b, r in st.points.items()], *_cap(inp)) or line


def _line(st: _State, b0: int | None) -> Line | None:
    if b0 is None:
        st.notes.append("the batch size was not found: one replay, at the script's shapes")
        return None
    st.run(2 * b0 if b0 > 1 else 2)
    return line_through([(b, r.peak_bytes) for b, r in st.points.items()])


def _check(st: _State, line: Line) -> int | None:
    """The predicted batch size, replayed: kept when its peak fits, else the line drawn again
    through the replays that bracket the budget and the new prediction replayed (at most
    :data:`MAX_CHECKS` replays). When no check was possible the line's prediction stands; when
    the checks kept failing, the largest replayed batch that fits."""
    inp = st.inp
    assert inp.capacity is not None
    limit = budget(inp.capacity, inp.margin)
    best = max_batch(line, inp.capacity, inp.margin)
    for _ in range(MAX_CHECKS):
        if best is None or best <= 0:
            return best
        r = st.points.get(best) or st.run(best)
        if r is None:
            return best  # not checked (the budget, or the replay failed: said in the notes)
        if r.peak_bytes <= limit:
            return best
        refined = refine([(b, p.peak_bytes) for b, p in st.points.items()], *_cap(inp))
        if refined is None:
            break
        failed = best
        best = max_batch(refined, inp.capacity, inp.margin)
        if best is not None:
            # the 512-byte blocks make the peak a staircase: at least below the failed batch by
            # what its excess and a few blocks cost in samples
            over = r.peak_bytes - limit + 4 * CUDA_BLOCK
            step = max(1, math.ceil(over / max(refined.per_sample, 1e-9)))
            best = min(best, failed - step)
    fits = [b for b, r in st.points.items() if r.peak_bytes <= limit]
    return max(fits) if fits else 0


def _cap(inp: PredictInput) -> tuple[int, float]:
    assert inp.capacity is not None
    return inp.capacity, inp.margin


def _failed(inp: PredictInput, reason: str, st: _State) -> MemoryPredicted:
    return MemoryPredicted(
        source="fake-tensors",
        batch_size=inp.step.batch_size,
        peak_bytes=None,
        by_category=None,
        bytes_per_sample=None,
        max_batch_size=None,
        margin=inp.margin,
        limit=f"not predicted: {reason}",
        replayed=inp.step.describe(),
        cost_s=round(inp.clock() - st.t0, 3),
        notes=[*inp.step.notes],
    )


def _record(
    st: _State, first: ReplayResult, line: Line | None, best: int | None
) -> MemoryPredicted:
    inp = st.inp
    notes = [*inp.step.notes, *first.notes, *st.notes]
    if st.skipped:
        notes.append(
            f"{st.skipped} replay(s) left out: the time budget ({inp.budget_s:g} s) was spent"
        )
    if inp.capacity is None:
        notes.append("no device: give --memory-for DEVICE|SIZE for the largest batch that fits")
    loss = {
        "recorded": "the script's loss",
        "surrogate": "a surrogate loss (the sum of the outputs)",
        "none": "none (the step had no backward)",
    }[first.loss]
    checked = sorted(b for b in st.points if b not in (inp.step.batch_size,))
    p = MemoryPredicted(
        source="fake-tensors",
        batch_size=inp.step.batch_size,
        peak_bytes=first.peak_bytes,
        by_category=first.split,
        bytes_per_sample=int(round(line.per_sample)) if line is not None else None,
        max_batch_size=best,
        margin=inp.margin,
        limit=(
            limit_text(inp.step.batch_size, first.split, line, inp.capacity, inp.margin, best)
            if inp.capacity is not None
            else "no device named: the largest batch is not predicted"
        ),
        fixed_bytes=int(round(line.fixed)) if line is not None else None,
        points=[
            MemoryPoint(batch_size=b, peak_bytes=r.peak_bytes) for b, r in sorted(st.points.items())
        ],
        largest=first.largest,
        replayed=f"{inp.step.describe()}; the loss: {loss}",
        device_model=_device_model(inp.step),
        cost_s=round(inp.clock() - st.t0, 3),
        notes=notes,
    )
    if first.flops is not None:
        p.step_flops = first.flops
    if checked:
        p.notes = [*notes, "replayed at batch " + ", ".join(str(b) for b in checked)]
    if line is not None and line.per_sample > 0 and first.peak_bytes and inp.capacity:
        p.notes = [*(p.notes or []), f"usable: {fmt_bytes(budget(inp.capacity, inp.margin))}"]
    return p


def _device_model(step: CapturedStep) -> str:
    if fake_device_for(step) == "cpu":
        return (
            "fake CPU tensors counted as the CUDA caching allocator counts them (512-byte "
            "blocks), torch.optim's CUDA default (foreach), attention and dropout as CUDA runs "
            "them; cuDNN's convolution workspaces not counted"
        )
    return "fake tensors on the model's CUDA device; cuDNN's convolution workspaces not counted"
