"""The one home of every default a user can change on the command line.

``gpuopt profile``'s options, the torchrun rank launcher and the probes all read these, so a
changed default is changed everywhere at once (the CLI's ``--help`` shows them).
"""

from __future__ import annotations

WARMUP_STEPS = 2  # --warmup: steps left out of the statistics
WINDOW_STEPS = 3  # --window: steps the recorder (and, on a GPU, the profiler) records in detail
SAMPLE_INTERVAL_S = 0.2  # --sample-interval: seconds between utilization samples
SAMPLE_INTERVAL_MIN_S = 0.005  # ... at least
SAMPLE_INTERVAL_MAX_S = 3600.0  # ... at most (the sampler's sleep must be finite)
