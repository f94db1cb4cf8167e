"""Built-in rules: every module named here registers its rules on import.

Listed, not discovered with pkgutil: the scan and pkgutil's import cost 2-3 ms at every
``gpuopt report`` start. tests/test_stats_rules.py checks that every module of this package is
listed.
"""

import importlib

MODULES = (
    "compile",
    "dataloader",
    "distributed",
    "framework",
    "gpu_trace",
    "host_copies",
    "host_dispatch",
    "host_fused",
    "host_loops",
    "host_ragged",
    "host_syncs",
    "memory",
    "slow_steps",
)

for _name in MODULES:
    importlib.import_module(f"{__name__}.{_name}")
