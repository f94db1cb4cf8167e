"""Did a fix judged by memory (``accumulation``) free memory? Pure functions over two profiles:
the step's peak in the baseline's profile (the run the fixes are planned from) against the
candidate's memory run, each read from the profile's ``memory`` section.

**The step's peak.** On a GPU, measured: the largest of the steps' own peaks the allocator
reported (``memory.measured.step_peaks_bytes``), else the run's peak. Without one, predicted:
the first training iteration replayed under fake tensors at the script's batch
(``memory.predicted.peak_bytes``, docs/memory.md) — a CPU run has no allocator to ask, and
without ``--memory-for DEVICE`` no prediction either: then there is no verdict. Both sides are
read from the same source, or there is no verdict.

**The verdict.** ``fits`` where the baseline's peak was over the usable memory (the device's,
less the margin) and the candidate's is within it; ``frees`` where the candidate's peak is lower
by :data:`MIN_FREED` of the baseline's at least; ``no-gain`` within that share either way (the
step's peak is not its activations: the optimizer's step, the model's states, a library's
workspace); ``more`` where it grew by more; ``not-measured`` without a peak on either side.
"""

from __future__ import annotations

from gpuopt.model.optimize import MemoryChange, MemoryVerdict
from gpuopt.model.profile import Profile
from gpuopt.model.records import MemoryReport, given
from gpuopt.units import fmt_bytes

# a peak lower by less than this share is no gain: the replay is exact to the byte, a GPU's
# allocator rounds to 512-byte blocks, so a smaller difference is no activation memory freed
MIN_FREED = 0.01

NO_MEMORY = (
    "no memory measured: a run without a GPU measures none; give --memory-for DEVICE to "
    "predict the step's peak for that device"
)


def step_peak(profile: Profile | None) -> tuple[int, str, MemoryReport] | None:
    """``(bytes, "measured" | "predicted", the memory section)`` of a profile's step, or None
    where it has neither."""
    m = given(profile.memory) if profile is not None else None
    if m is None:
        return None
    me = m.measured
    if me is not None:
        peaks = given(me.step_peaks_bytes) or []
        peak = max(peaks) if peaks else me.peak_allocated_bytes
        if peak:
            return peak, "measured", m
    p = m.predicted
    if p is not None and p.peak_bytes:
        return p.peak_bytes, "predicted", m
    return None


def _usable(m: MemoryReport) -> int | None:
    """The device's memory less the margin the prediction keeps free (None: no capacity)."""
    if not m.capacity_bytes:
        return None
    from gpuopt.defaults import MEMORY_MARGIN

    margin = m.predicted.margin if m.predicted is not None else MEMORY_MARGIN
    return int(m.capacity_bytes * (1 - margin))


def memory_change(base: Profile | None, cand: Profile | None) -> MemoryChange:
    """The candidate's step peak against the baseline's (see the module doc)."""
    before, after = step_peak(base), step_peak(cand)
    if before is None or after is None:
        side = "the baseline's profile" if before is None else "the candidate's memory run"
        return MemoryChange(verdict="not-measured", label=f"{NO_MEMORY} ({side} has none)")
    (b, source, m), (a, other, _) = before, after
    if source != other:
        return MemoryChange(
            verdict="not-measured",
            label=f"the baseline's peak is {source}, the candidate's {other}: not compared",
        )
    usable = _usable(m)
    freed = (b - a) / b
    where = f"{source} for {m.device}" if m.device and source == "predicted" else source
    label = f"peak {fmt_bytes(b)} -> {fmt_bytes(a)} ({-freed:+.1%}), {where}"
    if usable is not None:
        label += f", {fmt_bytes(usable)} usable"
    verdict: MemoryVerdict
    if usable is not None and b > usable >= a:
        verdict, label = "fits", f"fits now: {label}"
    elif freed >= MIN_FREED:
        verdict, label = "frees", f"frees {fmt_bytes(b - a)}: {label}"
    elif freed > -MIN_FREED:
        verdict = "no-gain"
        label = f"frees no memory (the step's peak is not its activations): {label}"
    else:
        verdict, label = "more", f"the peak grew: {label}"
    out = MemoryChange(verdict=verdict, label=label, before_bytes=b, after_bytes=a)
    out.freed_share, out.usable_bytes = round(freed, 4), usable
    out.source, out.device = source, m.device
    return out
