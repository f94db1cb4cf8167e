"""Utilization as every report format shows it: the CPU and GPU mean and max (in percent,
0-100, as the schema defines ``utilization``), the sampled timeline aligned to its timestamps,
and the notes that say how it was sampled or why a metric was not measured."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from msgspec import Struct

from gpuopt.model.records import given
from gpuopt.units import fmt_duration, num, one_line

if TYPE_CHECKING:
    from gpuopt.model.profile import Profile


class TimelineView(Struct):
    """Utilization samples over time. ``series`` values are PERCENT (0–100), None where a
    sample is missing; ``memory`` values are bytes. Only series with at least one sample."""

    t_s: list[float]
    series: dict[str, list[float | None]]  # "cpu", "gpu"
    memory: dict[str, list[float | None]]  # "rss_bytes", "gpu_memory_bytes"


def _aligned(
    values: Sequence[float | int | None] | None, keep: list[int]
) -> list[float | None] | None:
    """``values`` at the kept sample positions; None when there is not one finite value."""
    if not values:
        return None
    out = [num(values[i]) if i < len(values) else None for i in keep]
    return out if any(v is not None for v in out) else None


def timeline(profile: Profile) -> TimelineView | None:
    """The sampled utilization timeline, aligned to ``t_s`` (samples without a finite time are
    dropped); None when there are no samples."""
    tl = profile.utilization.timeline
    if tl is None:
        return None
    t = [num(x) for x in tl.t_s]
    keep = [i for i, x in enumerate(t) if x is not None]
    if not keep:
        return None
    candidates: dict[str, Sequence[float | int | None] | None] = {
        "cpu": tl.cpu,
        "gpu": tl.gpu,
        "rss_bytes": tl.rss_bytes,
        "gpu_memory_bytes": tl.gpu_memory_bytes,
    }
    aligned = {k: v for k, vals in candidates.items() if (v := _aligned(vals, keep)) is not None}
    series: dict[str, list[float | None]] = {k: aligned[k] for k in ("cpu", "gpu") if k in aligned}
    memory: dict[str, list[float | None]] = {
        k: aligned[k] for k in ("rss_bytes", "gpu_memory_bytes") if k in aligned
    }
    if not series and not memory:
        return None
    return TimelineView(t_s=[x for x in t if x is not None], series=series, memory=memory)


def utilization_summary(profile: Profile, key: str) -> tuple[float | None, float | None]:
    """``(mean, max)`` of ``utilization.cpu`` (``key="cpu"``) or ``utilization.gpu``, in
    percent (0–100)."""
    u = profile.utilization
    summary = u.cpu if key == "cpu" else u.gpu
    if summary is None:
        return None, None
    return num(summary.mean), num(summary.max)


def cpu_cores_note(profile: Profile) -> str:
    """``"≈1.8 of 8 cores busy"`` from ``utilization.cpu.cores_busy_mean`` / ``cpu_count``."""
    u = profile.utilization
    busy = num(given(u.cpu.cores_busy_mean))
    if busy is None:
        return ""
    cores = num(given(u.cpu_count))
    if cores is None:
        cores = num(profile.environment.cpu_count)
    return f"≈{busy:.1f} of {int(cores)} cores busy" if cores else f"≈{busy:.1f} cores busy"


def sampling_note(profile: Profile, tl: TimelineView | None) -> str:
    """``"136 samples every 100 ms over 13.5 s"``: how the timeline was sampled."""
    if tl is None or len(tl.t_s) < 2:
        return ""
    span = tl.t_s[-1] - tl.t_s[0]
    interval = num(given(profile.utilization.interval_s))
    if interval is None:
        interval = span / (len(tl.t_s) - 1)
    return f"{len(tl.t_s)} samples every {fmt_duration(interval)} over {fmt_duration(span)}"


def utilization_note(profile: Profile) -> str:
    """Why a metric was not measured (``utilization.note``), or ""."""
    return one_line(given(profile.utilization.note))


def gpu_utilization_measured(profile: Profile) -> bool:
    mean, mx = utilization_summary(profile, "gpu")
    tl = timeline(profile)
    return mean is not None or mx is not None or (tl is not None and "gpu" in tl.series)
