"""The one home of every default a user can change on the command line.

``gpuopt profile``'s options, the torchrun rank launcher and the probes all read these, so a
changed default is changed everywhere at once (the CLI's ``--help`` shows them).
"""

from __future__ import annotations

WARMUP_STEPS = 2  # --warmup: steps left out of the statistics
WINDOW_STEPS = 3  # --window: steps the recorder (and, on a GPU, the profiler) records in detail
# --window at most: the steps the window names are kept as a set (10**21 hung building it)
WINDOW_MAX_STEPS = 100_000
OPTIMIZE_STEPS = 30  # gpuopt optimize --steps: training steps of every run
OPTIMIZE_SEED = 0  # gpuopt optimize --seed: every run's
SAMPLE_INTERVAL_S = 0.2  # --sample-interval: seconds between utilization samples
SAMPLE_INTERVAL_MIN_S = 0.005  # ... at least
SAMPLE_INTERVAL_MAX_S = 3600.0  # ... at most (the sampler's sleep must be finite)
# --memory-for: the share of the device's memory a predicted batch size leaves free (the CUDA
# context, the allocator's rounding and free blocks, what the fake replay cannot see)
MEMORY_MARGIN = 0.10
# --memory-for: the most wall time the fake-tensor replays of the step may take together (the
# first one always runs; later ones only while the budget lasts)
MEMORY_BUDGET_S = 30.0
# --seed at most: torch.manual_seed takes a C long long (a larger seed raises inside torch)
SEED_MAX = 2**63 - 1
# --nproc-per-node at most: processes torchrun starts on one node (a huge count hangs spawning)
NPROC_MAX = 1024
