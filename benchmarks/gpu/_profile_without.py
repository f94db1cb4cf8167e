"""``gpuopt profile`` with some of its parts switched off: check_profile's split of the overhead.

    python3 benchmarks/gpu/_profile_without.py memory,nvml profile --quiet ... SCRIPT ARGS

``memory``: no memory probe (on a GPU it reads the allocator's peaks for 64 steps, records the
first step as a program, tracks the next by category); ``nvml``: the sampler thread runs without
NVML (no device reads). A benchmark's switch, never a user's option.
"""

from __future__ import annotations

import sys
from typing import Any


def main() -> None:
    from gpuopt.runner import session

    parts = set(sys.argv[1].split(","))
    cls: Any = session.ProfileSession
    if "memory" in parts:
        cls._memory_probe = lambda self: None
    if "nvml" in parts:
        cls._open_nvml = lambda self: (None, None)
    sys.argv = ["gpuopt", *sys.argv[2:]]
    from gpuopt.commands.entry import main as gpuopt_main

    gpuopt_main()


if __name__ == "__main__":
    main()
