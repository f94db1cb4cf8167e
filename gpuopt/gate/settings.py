"""``gpuopt check``'s threshold settings, one row each: the settings file's key (``--KEY`` on the
command line), the :class:`gpuopt.gate.check.Thresholds` field it sets, the unit of a bare
number, and its help. :mod:`gpuopt.gate.config` reads the file's keys from it and
:mod:`gpuopt.commands.options` the command line's options.

Pure data (typing its one import): the entry point's fast path reads it, and
``gpuopt.gate.config`` imports numpy.
"""

from __future__ import annotations

from typing import NamedTuple


class Setting(NamedTuple):
    key: str  # "max-step-time-regression": the file's key, and the option without its "--"
    field: str  # the Thresholds field: "max_step_time_regression"
    unit: str  # what a bare number means: "%" (of the baseline) or "pt" (points of a share)
    help: str  # gpuopt check --help's line


SETTINGS = (
    Setting(
        "max-step-time-regression",
        "max_step_time_regression",
        "%",
        "Fail when the median step time's interval lies beyond this slowdown (default 5%).",
    ),
    Setting(
        "max-data-wait-increase",
        "max_data_wait_increase",
        "pt",
        "Fail when the data-wait share rises by more (default 3pt).",
    ),
    Setting(
        "max-outside-ops-increase",
        "max_outside_ops_increase",
        "pt",
        "Fail when the step's time outside tensor ops (a sleep, a blocking read, Python work "
        "issuing no op) rises by more, in points of the baseline's step (default 5pt).",
    ),
    Setting(
        "max-gpu-idle-increase",
        "max_gpu_idle_increase",
        "pt",
        "Fail when a rank's GPU idle share rises by more (default 3pt).",
    ),
    Setting(
        "min-gpu-util",
        "min_gpu_util",
        "%",
        "Fail when a rank's GPU utilization is below (e.g. 60%).",
    ),
    Setting(
        "step-time-noise",
        "step_time_noise",
        "%",
        "The least run-to-run drift of step time the interval assumes (default 1%).",
    ),
    Setting(
        "share-noise",
        "share_noise",
        "pt",
        "The least run-to-run drift of a share (data wait, GPU idle; default 1pt).",
    ),
)
