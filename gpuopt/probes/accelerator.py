"""A tiny accelerator interface, so GPU sampling is injectable and absent GPUs are not an error.

``NvmlBackend`` is the whole surface gpuopt needs from NVML. :func:`open_nvml` returns the real
one (nvidia-ml-py, ``pynvml``) or ``None`` with the reason; tests pass a fake with the same
methods. Nothing here imports torch.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, Protocol

from msgspec import Struct

from gpuopt.debug import logger

log = logger(__name__)


class GpuSample(Struct):
    """One reading of one GPU. ``None`` where the driver does not report the value."""

    index: int
    util_pct: float | None
    memory_used_bytes: int | None
    power_w: float | None
    sm_clock_mhz: float | None
    process_util_pct: float | None = None  # this process tree's SM share, where the driver allows


class NvmlBackend(Protocol):
    def device_count(self) -> int: ...

    def name(self, index: int) -> str: ...

    def memory_total(self, index: int) -> int: ...

    def sample(self, index: int, pids: set[int]) -> GpuSample: ...

    def close(self) -> None: ...


class PynvmlBackend:
    """NVML through nvidia-ml-py. Each optional query degrades to ``None`` on NVMLError."""

    def __init__(self) -> None:
        import pynvml

        self._nv = pynvml
        pynvml.nvmlInit()
        self._handles = [
            pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
        ]
        self._last_ts = [0] * len(self._handles)

    def device_count(self) -> int:
        return len(self._handles)

    def name(self, index: int) -> str:
        n = self._nv.nvmlDeviceGetName(self._handles[index])
        return n.decode() if isinstance(n, bytes) else str(n)

    def memory_total(self, index: int) -> int:
        return int(self._nv.nvmlDeviceGetMemoryInfo(self._handles[index]).total)

    def _try(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self._nv.NVMLError as exc:
            log.debug_once("NVML %s failed: %s", getattr(fn, "__name__", fn), exc)
            return None

    def sample(self, index: int, pids: set[int]) -> GpuSample:
        nv, h = self._nv, self._handles[index]
        util = self._try(nv.nvmlDeviceGetUtilizationRates, h)
        mem = self._try(nv.nvmlDeviceGetMemoryInfo, h)
        power = self._try(nv.nvmlDeviceGetPowerUsage, h)
        clock = self._try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
        proc_util = None
        samples = self._try(nv.nvmlDeviceGetProcessUtilization, h, self._last_ts[index])
        if samples:
            mine = [s for s in samples if s.pid in pids]
            self._last_ts[index] = max(s.timeStamp for s in samples)
            if mine:
                proc_util = float(max(s.smUtil for s in mine))
        return GpuSample(
            index=index,
            util_pct=float(util.gpu) if util is not None else None,
            memory_used_bytes=int(mem.used) if mem is not None else None,
            power_w=power / 1000.0 if power is not None else None,
            sm_clock_mhz=float(clock) if clock is not None else None,
            process_util_pct=proc_util,
        )

    def close(self) -> None:
        try:
            self._nv.nvmlShutdown()
        except Exception as exc:
            log.debug("nvmlShutdown failed: %s", exc)


def _driver_may_exist() -> bool:
    """False only where NVML surely cannot load: Linux with neither the NVIDIA control device nor
    WSL's GPU device. Saves importing pynvml (~10 ms) on every CPU-only run; anywhere else (other
    systems, odd containers) NVML itself decides."""
    if not sys.platform.startswith("linux"):
        return True
    return any(os.path.exists(dev) for dev in ("/dev/nvidiactl", "/dev/dxg"))


def open_nvml() -> tuple[NvmlBackend | None, str | None]:
    """The real NVML backend, or ``(None, reason)`` when there is no NVIDIA GPU or driver."""
    if not _driver_may_exist():
        return None, "no NVIDIA driver (/dev/nvidiactl absent): GPU utilization not measured"
    try:
        import pynvml  # noqa: F401
    except ImportError as exc:
        log.debug("pynvml not importable: %s", exc)
        return (
            None,
            "nvidia-ml-py is not installed: GPU utilization not measured "
            "(pip install nvidia-ml-py)",
        )
    try:
        backend = PynvmlBackend()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        log.debug("NVML did not start: %s: %s", type(exc).__name__, exc)
        return None, f"no NVIDIA GPU/NVML ({type(exc).__name__}): GPU utilization not measured"
    if backend.device_count() == 0:
        backend.close()
        return None, "NVML found no GPU: GPU utilization not measured"
    return backend, None
