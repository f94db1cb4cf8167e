"""The window's stretches without tensor ops, by where each sat in its step: the same stretch in
every step, where the gap sampler looked into it in only some.

The recorder measures every stretch between two model ops of at least ``GAP_FLOOR_S``
(``StepCounters.gaps``, by when it began) and how many model ops of its step ran before it
(``StepCounters.gap_ops``). The gap sampler looks at the training thread once a millisecond, and
less often while the thread holds the GIL, so it can see a stretch in only some steps
(bench_check: a 1.5 ms sleep after every step of ``examples/index_loops.py`` is seen in one
window step of three in 3 of 20 runs). A step's code runs its ops in the same order every step,
so a stretch after the same number of ops in a step with as many ops is the same code: it is
named at the line the sampler saw there, for its measured length. Steps with another number of
ops (ragged batches, a data-dependent loop) are left as the sampler saw them; a stall in one step
(a collection, the process descheduled) sits where the other steps have no long stretch, and
stays in its step.

A stall also stays out of what ``gpuopt check`` compares (:func:`recurring`): on a slowed machine
the sampler names 1-4 ms stalls inside a loop, each at its own place, in some window steps only
(bench_check: 12.3% of index_loops' step in two window steps of three, against 0 in the steps'
median), which would fail the outside-ops gate on identical code. A regression (a sleep, a
blocking read, a loop without ops) is the same stretch in every step.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from msgspec import Struct, field

from gpuopt.probes.recorder_snapshot import StepSnapshot

Place = tuple[int, int]  # (model ops before the stretch, model ops in its step)


class Stretches(Struct):
    """Every recorded stretch by when it began: its seconds, its window step and its place."""

    lengths: dict[float, float] = field(default_factory=dict)
    step: dict[float, int] = field(default_factory=dict)
    place: dict[float, Place] = field(default_factory=dict)
    ops: list[int] = field(default_factory=list)  # model ops in each window step


def stretches(steps: Sequence[StepSnapshot]) -> Stretches:
    """The stretches of the window's steps (``steps[i]``: window step ``i``)."""
    out = Stretches()
    for i, acc in enumerate(steps):
        out.ops.append(acc.ops)
        for start, length in acc.gaps.items():
            out.lengths[start] = length
            out.step[start] = i
            ops = acc.gap_ops.get(start)
            if ops is not None:
                out.place[start] = (ops, acc.ops)
    return out


def same_stretches(
    found: Stretches, named: dict[float, tuple[str, str]], bound_s: float
) -> Iterable[tuple[tuple[str, str], int, float, float]]:
    """The stretches no sample looked into that sit where a named one sat in another step:
    ``(its line and frame, its window step, its seconds, its start)``; those shorter than
    ``bound_s`` (op dispatch) left out. ``named``: the line of each stretch the samples named,
    by its start."""
    lines: dict[Place, tuple[str, str]] = {}
    for start in sorted(named):  # the earliest sample's line where two steps differ
        place = found.place.get(start)
        if place is not None:
            lines.setdefault(place, named[start])
    if not lines:
        return
    for start, length in found.lengths.items():
        if start in named or length < bound_s:
            continue
        place = found.place.get(start)
        where = lines.get(place) if place is not None else None
        if where is not None:
            yield where, found.step.get(start, 0), length, start


def recurring(found: Stretches, bound_s: float) -> set[float]:
    """The starts of the stretches (``bound_s`` or longer) that recur: at their place, a stretch
    of ``bound_s`` or longer, and at least half as long, in most of the window steps with as many
    ops (more than half of them). A stretch whose place cannot be told apart, no other step having
    as many ops (a ragged batch, a one-step window), counts as recurring: it is left as the
    sampler saw it. As long, roughly: a 30 ms stall in one step is not made to recur by a 0.13 ms
    hiccup at its place in another (a loaded fresh-clone CI), while a planted sleep is the same
    length in every step."""
    steps_with = Counter(found.ops)  # ops in a step -> window steps with as many
    long = [s for s, length in found.lengths.items() if length >= bound_s]
    seen: dict[Place, list[tuple[int, float]]] = {}
    for start in long:
        place = found.place.get(start)
        if place is not None:
            seen.setdefault(place, []).append((found.step.get(start, 0), found.lengths[start]))
    out = set()
    for start in long:
        place = found.place.get(start)
        alike = steps_with.get(place[1], 0) if place is not None else 0
        if place is None or alike < 2:
            out.add(start)
            continue
        half = found.lengths[start] / 2
        if 2 * len({step for step, length in seen[place] if length >= half}) > alike:
            out.add(start)
    return out
