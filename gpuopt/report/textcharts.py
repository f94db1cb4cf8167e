"""Charts drawn with characters, for the terminal and Markdown: sparklines, bars split into
whole cells, and long series averaged down to the cells there are."""

from __future__ import annotations

from collections.abc import Sequence

_SPARK = "▁▂▃▄▅▆▇█"


def spark(values: Sequence[float | None], lo: float = 0.0, hi: float = 1.0) -> str:
    """One character per value, ``▁`` at ``lo`` to ``█`` at ``hi``; a blank where not sampled."""
    out = []
    span = hi - lo if hi > lo else 1.0
    for v in values:
        if v is None:
            out.append(" ")
            continue
        x = min(1.0, max(0.0, (v - lo) / span))
        out.append(_SPARK[min(len(_SPARK) - 1, int(round(x * (len(_SPARK) - 1))))])
    return "".join(out)


def bar_lengths(fractions: Sequence[float], width: int) -> list[int]:
    """Split ``width`` cells among ``fractions`` by largest remainder (the lengths sum to
    ``width`` exactly, so the bar never jitters by a cell between reports)."""
    total = sum(fractions)
    if total <= 0 or width <= 0:
        return [0] * len(fractions)
    raw = [f / total * width for f in fractions]
    lengths = [int(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: (-(raw[i] - lengths[i]), i))
    for i in order[: width - sum(lengths)]:
        lengths[i] += 1
    return lengths


def resample(values: Sequence[float | None], buckets: int) -> list[float | None]:
    """Average ``values`` into ``buckets`` consecutive groups (None where a group has no data);
    shorter inputs are returned as they are."""
    n = len(values)
    if n <= buckets or buckets <= 0:
        return list(values)
    out: list[float | None] = []
    for b in range(buckets):
        lo = b * n // buckets
        hi = max(lo + 1, (b + 1) * n // buckets)
        group = [v for v in values[lo:hi] if v is not None]
        out.append(sum(group) / len(group) if group else None)
    return out
