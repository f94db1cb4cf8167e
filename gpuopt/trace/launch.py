"""Kernel launch statistics: CPU launch duration, launch delay, short kernels, outliers.

A launch is a CPU runtime call (``cudaLaunchKernel``, ``cudaLaunchKernelExC``,
``cudaMemcpyAsync``, ``cudaMemsetAsync``; for ROCm the ``hip*`` equivalents) joined to the GPU
event with the same correlation id. Launch delay = GPU start − end of the runtime call, clipped
at 0 (HTA). A *short kernel* runs for less time on the GPU than its launch took on the CPU: the
GPU cannot be kept busy by such kernels however fast the host is.
"""

from __future__ import annotations

import msgspec
import numpy as np

from gpuopt.model.trace import Distribution, LaunchStats
from gpuopt.stats.quantiles import median, percentile
from gpuopt.trace.array_stats import member
from gpuopt.trace.columns import FloatArray, IntArray
from gpuopt.trace.prepare import RankView

# HTA 0.5's list (CUDA, plus MTIA's submit call).
HTA_LAUNCH_NAMES = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "runFunction - job_prep_and_submit_for_execution",
    "cudaMemsetAsync",
    "cudaMemcpyAsync",
)
# Also counted by gpuopt (HTA reports no launches for ROCm traces).
EXTRA_LAUNCH_NAMES = (
    "hipLaunchKernel",
    "hipExtLaunchKernel",
    "hipExtModuleLaunchKernel",
    "hipModuleLaunchKernel",
    "hipMemcpyAsync",
    "hipMemsetAsync",
    "hipMemcpyWithStream",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
)
RUNTIME_OUTLIER_US = 50.0
LAUNCH_DELAY_OUTLIER_US = 100.0


class Launches(msgspec.Struct):
    correlation: IntArray
    cpu_index: IntArray
    gpu_index: IntArray
    cpu_dur: FloatArray
    gpu_dur: FloatArray
    delay: FloatArray

    def summary(self) -> LaunchStats:
        """Counts and distributions of the launches (HTA's launch statistics)."""
        return LaunchStats(
            count=int(self.cpu_dur.size),
            cpu_duration_us=distribution(self.cpu_dur),
            gpu_duration_us=distribution(self.gpu_dur),
            launch_delay_us=distribution(self.delay),
            short_kernels=int((self.gpu_dur < self.cpu_dur).sum()),
            runtime_outliers=int((self.cpu_dur > RUNTIME_OUTLIER_US).sum()),
            launch_delay_outliers=int((self.delay > LAUNCH_DELAY_OUTLIER_US).sum()),
            runtime_outlier_us=RUNTIME_OUTLIER_US,
            launch_delay_outlier_us=LAUNCH_DELAY_OUTLIER_US,
        )


def distribution(x: FloatArray) -> Distribution:
    """Mean, median, p95, max and sum of a sample (all but the sum None when it is empty)."""
    if x.size == 0:
        return Distribution()
    return Distribution(
        mean=float(x.mean()),
        median=median(x),
        p95=percentile(x, 95),
        max=float(x.max()),
        sum=float(x.sum()),
    )


def launch_stats(
    v: RankView, names: tuple[str, ...] = HTA_LAUNCH_NAMES + EXTRA_LAUNCH_NAMES
) -> Launches:
    """All CPU-launch ↔ GPU-event pairs (joined on correlation id, many-to-many as in HTA)."""
    is_launch = v.ev.has_name(lambda n: n in names)
    in_set = member(v.ev.correlation, v.ev.correlation[is_launch])
    cpu = np.flatnonzero(in_set & ~v.on_stream)
    gpu = np.flatnonzero(in_set & v.on_stream)
    # inner join on correlation
    cc, gc = v.ev.correlation[cpu], v.ev.correlation[gpu]
    co, go = np.argsort(cc, kind="stable"), np.argsort(gc, kind="stable")
    cpu, cc, gpu, gc = cpu[co], cc[co], gpu[go], gc[go]
    lo = gc.searchsorted(cc, side="left")
    hi = gc.searchsorted(cc, side="right")
    reps = hi - lo
    ci = np.repeat(cpu, reps)
    total = int(reps.sum())
    first = np.cumsum(reps) - reps
    gpos = np.repeat(lo, reps) + (np.arange(total) - np.repeat(first, reps))
    gi = gpu[gpos] if total else np.zeros(0, dtype=np.int64)
    cpu_dur = v.dur[ci]
    delay = np.clip(v.ts[gi] - v.ts[ci] - cpu_dur, 0, None)
    return Launches(v.ev.correlation[ci], ci, gi, cpu_dur, v.dur[gi], delay)
