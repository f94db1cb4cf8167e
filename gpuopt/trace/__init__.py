"""PyTorch profiler (Kineto, Chrome-trace JSON) traces: fast columnar loading and GPU analyses.

``gpuopt report TRACE`` and the profiler window of ``gpuopt profile`` both go through
:func:`gpuopt.trace.analysis.analyze_columns` (one rank's columns → ``RankAnalysis``, whose
results are the typed records of :mod:`gpuopt.model.trace`), one rank at a time, into rank
summaries (:mod:`gpuopt.assemble.trace_job`). This package measures only: the profile is put
together from those records by :mod:`gpuopt.assemble.trace_profile` (``profile_from_traces``,
``add_trace_to_profile``). Nothing here imports torch or pandas: traces
are decoded with msgspec into numpy columns, and every analysis is a pure function from columns to
small result records. Import the submodules directly; this package module stays empty so
``import gpuopt`` stays light.
"""
