"""PyTorch profiler (Kineto, Chrome-trace JSON) traces: fast columnar loading and GPU analyses.

``gpuopt report TRACE`` and the profiler window of ``gpuopt profile`` both go through
:func:`gpuopt.trace.analysis.analyze_trace` (file or folder of ranks → :class:`TraceAnalysis`),
then :func:`gpuopt.trace.profile.profile_from_traces` turns that into a ``gpuopt.profile/1``
document. Nothing here imports torch or pandas: traces are decoded with msgspec into numpy
columns, and every analysis is a pure function from columns to small result records.
"""

from __future__ import annotations

__all__ = ["analyze_trace", "profile_from_traces"]


def analyze_trace(path):  # type: ignore[no-untyped-def]
    """Lazy re-export of :func:`gpuopt.trace.analysis.analyze_trace` (keeps ``import gpuopt`` light)."""
    from gpuopt.trace.analysis import analyze_trace as _analyze

    return _analyze(path)


def profile_from_traces(path):  # type: ignore[no-untyped-def]
    """Lazy re-export of :func:`gpuopt.trace.profile.profile_from_traces`."""
    from gpuopt.trace.profile import profile_from_traces as _profile

    return _profile(path)
