"""What the gpu-check scripts share: the repository on sys.path, the budget, Markdown lines
printed as they come, the dry run, and running gpuopt from the source tree.

A script here runs as ``python3 benchmarks/gpu/check_<topic>.py [--budget S]`` from a source
tree, gpuopt not installed (msgspec, isal and libcst from ``.whl/``: docs/gpu-validation.md). The
runner (``gpu_check.py``) sets ``GPUOPT_GPU_CHECK_DRY_RUN=1`` for its CPU dry run: the scripts
that read it then run their logic on the CPU with tiny sizes instead of skipping.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DRY_RUN_ENV = "GPUOPT_GPU_CHECK_DRY_RUN"


def dry_run() -> bool:
    return os.environ.get(DRY_RUN_ENV) == "1"


def say(line: str) -> None:
    """One Markdown line, flushed at once: a run cut short keeps what it printed."""
    print(line, flush=True)


class Budget:
    """The seconds a check may take, from its start."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.t0 = time.perf_counter()

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.t0)


def parse_budget(description: str, default: float = 40.0) -> Budget:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--budget", type=float, default=default, help="seconds this check may take")
    return Budget(ap.parse_args().budget)


def device_or_skip() -> str | None:
    """``"cuda"``; ``"cpu"`` in a dry run; None (after saying so) without a CUDA device."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if dry_run():
        return "cpu"
    say("skipped: no CUDA device")
    return None


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child process: the repository first on PYTHONPATH (gpuopt runs as
    ``python3 -m gpuopt`` from the source tree), then what was there (the wheels' folder)."""
    env = dict(os.environ)
    parts = [str(ROOT), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    env.update(extra)
    return env


def run(
    cmd: list[str], timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=max(timeout, 1.0),
        env=env or child_env(),
    )


def gpuopt_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpuopt", *args]
