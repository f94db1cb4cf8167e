"""The process's environment: Python, torch, the device the run used, its GPUs and cores."""

from __future__ import annotations

import os
import platform
import sys

from gpuopt.debug import logger
from gpuopt.model.profile import Environment, GpuInfo

log = logger(__name__)


def platform_name() -> str:
    """``platform.platform(terse=True)`` without running a process: Python reads the processor
    for it with ``uname -p`` (a child process, 1-3 ms, the first time: in a run, from the
    sampling thread's first checkpoint, mid-step), and on Linux that string leaves the processor
    out anyway where it names the machine again or is unknown, as it nearly always does."""
    u = platform.uname()  # the processor is read only when asked for
    if u.system != "Linux":
        return platform.platform(terse=True)
    libc, version = platform.libc_ver()
    parts = (u.system, u.release, u.machine, "with" if libc else "", libc + version)
    return "-".join(p.strip().replace(" ", "_").replace("/", "-") for p in parts if p.strip())


def environment() -> Environment:
    """Python, torch, device and GPUs of this process (read when the run ends: torch is imported
    by then, and CUDA initialised if the run used it)."""
    env = Environment(
        python=platform.python_version(),
        cpu_count=os.cpu_count() or 1,
        platform=platform_name(),
    )
    torch = sys.modules.get("torch")
    if torch is None:
        return env
    version = getattr(torch, "__version__", None)
    env.torch = str(version) if version is not None else None  # torch's is a str subclass
    try:
        env.torch_threads = int(torch.get_num_threads())
    except Exception as exc:
        log.debug("torch.get_num_threads() failed: %s", exc)
    try:
        if torch.cuda.is_available():
            env.gpus = [
                GpuInfo(
                    name=torch.cuda.get_device_name(i),
                    memory_bytes=int(torch.cuda.get_device_properties(i).total_memory),
                )
                for i in range(torch.cuda.device_count())
            ]
            if torch.cuda.is_initialized():
                env.device = "cuda"
    except Exception as exc:  # a broken driver must not lose the profile
        log.debug("the GPUs not listed: %s: %s", type(exc).__name__, exc)
    return env
