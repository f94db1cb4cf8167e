"""Measurements the rules share, read from a typed Profile: step time, shares, the source.

A document may come from ``gpuopt profile`` (the recorder's window has shares and times), from
``gpuopt report TRACE`` (times per step, no shares), or from an older gpuopt: optional values
are None or unset, so every reader here says what it does when a value is missing.
"""

from __future__ import annotations

from gpuopt.model.profile import Profile
from gpuopt.units import num


def value(x: object, default: float = 0.0) -> float:
    """A finite number from the document, or ``default`` (null, unset, NaN)."""
    v = num(x)
    return default if v is None else v


def on_cpu_only(profile: Profile) -> bool:
    """Whether the recorder ran without an accelerator (its device findings are inferred)."""
    return profile.dispatch.measured_device == "cpu"


def from_trace(profile: Profile) -> bool:
    """A ``gpuopt report TRACE`` document: the trace rules (``gpu_trace``) report these causes
    from the trace itself, so the host rules stay silent rather than report them twice."""
    return profile.source == "trace"


def step_us(profile: Profile) -> float | None:
    """The step time in microseconds: the recorder window's (corrected), else the run's median."""
    window = value(profile.dispatch.step_time_us)
    if window > 0:
        return window
    median = value(profile.steps.time_s.median)
    return median * 1e6 if median > 0 else None


def share_of(profile: Profile, share: object, us_per_step: object) -> float | None:
    """An entry's share of the step: as recorded, or from its time per step (trace documents
    carry times without shares); None when the document has neither."""
    recorded = num(share)
    if recorded is not None:
        return recorded
    us = num(us_per_step)
    step = step_us(profile)
    if us is not None and step:
        return min(max(us / step, 0.0), 1.0)
    return None
