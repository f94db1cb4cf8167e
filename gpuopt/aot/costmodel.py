"""Per-operator cost model and device profiles for the speedup *estimate* (no GPU needed).

This is a model, not a measurement. Each kernel's time when it has the GPU to itself is a
roofline, ``max(FLOPs / peak, bytes / HBM bandwidth)`` at a fixed fraction of peak, divided by
the fraction of the GPU it can occupy ("width": one thread per output element, or per 16 input
elements for reductions, until all resident thread slots, SMs x 2048, are busy), with a floor for
the shortest kernels. Host overheads are fixed per operator (eager) or per kernel (CUDA graph).
What it leaves out: cache effects, kernel
choice (cuDNN/cuBLAS heuristics, split-K), tail effects, clock boost, memory-allocator time,
contention between concurrent kernels beyond a shared-capacity model. See docs/aot.md.

Every figure below is cited; "assumption" marks the ones that are not a published number.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

# Shared host/launch figures (per operator / per kernel), the same on every device profile:
# - PyTorch dispatcher time of an op that launches no kernel: ~3.3 us per call, from the PyTorch
#   operator micro-benchmark quoted in pytorch/pytorch PR #32194 (`split`, CUDA, "Forward
#   Execution Time (us): 3.3").
# - CUDA launch path: median cudaLaunchKernel time 5.2 us in the recorded V100-SXM2 trace
#   tests/data/shared/traces/hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz
#   (4,350 launches); NVIDIA's "Getting Started with CUDA Graphs" blog (A. Gray, 2019) and
#   later measurements put one launch at 4-6 us.
# - Shortest kernels: 5th percentile of kernel durations in that same trace is 1.7 us.
# - Per-kernel device-side gap: in the NVIDIA CUDA Graphs blog above a 2.9 us kernel took 3.8 us
#   per kernel when launched back to back on a stream (~0.9 us gap) and 3.4 us inside a graph
#   (~0.5 us gap).
_DISPATCH_S = 3.3e-6
_LAUNCH_S = 5.2e-6
_MIN_KERNEL_S = 1.7e-6
_STREAM_KERNEL_S = 0.9e-6
_GRAPH_KERNEL_S = 0.5e-6
# Max resident threads per SM is 2048 on compute capability 7.0, 8.0 and 9.0 (CUDA C++
# Programming Guide, "Technical Specifications per Compute Capability").
_THREADS_PER_SM = 2048
# Assumption: a reduction-like kernel (GEMV, mean, norm statistics) gives each thread ~16 input
# elements, so its parallelism is max(outputs, inputs / 16) threads.
_INPUTS_PER_THREAD = 16


@dataclass(frozen=True)
class DeviceProfile:
    """Peak rates and overheads of one GPU, for the cost model."""

    name: str
    description: str
    fp32_flops: float  # non-tensor-core FP32
    tf32_flops: float  # dense TF32 tensor core (== fp32_flops where there is none)
    fp16_flops: float  # dense FP16/BF16 tensor core
    mem_bw: float  # HBM bytes/s
    num_sms: int
    threads_per_sm: int = _THREADS_PER_SM
    efficiency: float = 0.7  # assumption: fraction of peak FLOP/s and bandwidth a kernel reaches
    eager_op_s: float = _DISPATCH_S + _LAUNCH_S  # host time per eager op that launches a kernel
    eager_view_s: float = (
        _DISPATCH_S  # host time per eager op that launches nothing (view, getitem)
    )
    stream_kernel_s: float = _STREAM_KERNEL_S  # per-kernel device gap, kernels launched one by one
    graph_kernel_s: float = _GRAPH_KERNEL_S  # per-kernel gap when replaying a CUDA graph
    graph_launch_s: float = _LAUNCH_S  # one cudaGraphLaunch (assumption: about one kernel launch)
    min_kernel_s: float = _MIN_KERNEL_S
    event_s: float = 0.0  # assumption: a cross-stream edge in a graph costs no more than any edge

    def label(self) -> str:
        return (
            f"roofline per op max(FLOPs/peak, bytes/HBM) at {self.efficiency:.0%} of peak, width = "
            f"max(outputs, inputs/16)/({self.num_sms} SMs x {self.threads_per_sm} threads), "
            f"kernels >= {self.min_kernel_s * 1e6:.1f} us, processor sharing between streams, "
            f"eager host {self.eager_op_s * 1e6:.1f} us/op + "
            f"{self.stream_kernel_s * 1e6:.1f} us/kernel, graph "
            f"{self.graph_kernel_s * 1e6:.1f} us/kernel; "
            f"profile {self.name}: {self.description}"
        )


# H100 SXM5: NVIDIA H100 Tensor Core GPU datasheet: FP32 67 TFLOPS, TF32 tensor 989 TFLOPS and
# FP16/BF16 1,979 TFLOPS "with sparsity" (dense is half), 3.35 TB/s HBM3; 132 SMs (NVIDIA
# "Hopper Architecture In-Depth" / H100 whitepaper).
H100 = DeviceProfile(
    name="h100",
    description=(
        "NVIDIA H100 SXM5 (67 TFLOP/s FP32, 494.5 TF32, 989.5 FP16 dense; 3.35 TB/s; 132 SMs)"
    ),
    fp32_flops=67e12,
    tf32_flops=494.5e12,
    fp16_flops=989.5e12,
    mem_bw=3.35e12,
    num_sms=132,
)
# A100 SXM4 80GB: NVIDIA A100 datasheet: FP32 19.5 TFLOPS, TF32 156, FP16/BF16 312 (dense),
# 2,039 GB/s HBM2e; 108 SMs (NVIDIA A100 Tensor Core GPU Architecture whitepaper).
A100 = DeviceProfile(
    name="a100",
    description="NVIDIA A100 SXM4 80GB (19.5 TFLOP/s FP32, 156 TF32, 312 FP16; 2.04 TB/s; 108 SMs)",
    fp32_flops=19.5e12,
    tf32_flops=156e12,
    fp16_flops=312e12,
    mem_bw=2.039e12,
    num_sms=108,
)
# V100 SXM2: NVIDIA Tesla V100 datasheet: FP32 15.7 TFLOPS, tensor (FP16) 125 TFLOPS, 900 GB/s
# HBM2; 80 SMs (Volta whitepaper). No TF32: FP32 convolutions and matmuls run at the FP32 rate.
V100 = DeviceProfile(
    name="v100",
    description="NVIDIA V100 SXM2 (15.7 TFLOP/s FP32, 125 FP16 tensor; 900 GB/s; 80 SMs)",
    fp32_flops=15.7e12,
    tf32_flops=15.7e12,
    fp16_flops=125e12,
    mem_bw=900e9,
    num_sms=80,
)

PROFILES: dict[str, DeviceProfile] = {p.name: p for p in (H100, A100, V100)}
# The cost models under the names of gpuopt's one list of GPUs (gpuopt.memory.devices.DEVICES,
# the names --memory-for takes); the models' own names, a100 and v100, stay accepted.
COST_MODEL_OF: dict[str, str] = {
    "h100": "h100",
    "h100-80gb": "h100",
    "a100-80gb": "a100",
    "v100-16gb": "v100",
    "v100-32gb": "v100",
}


def get_profile(name: str) -> DeviceProfile:
    """A device profile by a name of the device list or its own name (``H100``, ``a100-80gb``,
    ``a100``); ValueError naming the devices that have one."""
    from gpuopt.memory.devices import DEVICES, device_key

    key = device_key(name)
    if key in PROFILES or key in COST_MODEL_OF:
        return PROFILES[COST_MODEL_OF.get(key, key)]
    names = ", ".join(sorted(COST_MODEL_OF))
    if key in DEVICES:
        raise ValueError(
            f"no cost model for {name!r} ({DEVICES[key][1]}); gpuopt schedule estimates for: "
            f"{names}"
        )
    raise ValueError(
        f"unknown device profile {name!r}; known: {names} (also a100: the A100 80GB, and v100)"
    )


@dataclass(frozen=True)
class OpCost:
    """Modelled cost of one node."""

    kernel: bool
    solo_s: float  # device time with the whole GPU to itself (0 for non-kernels)
    width: float  # fraction of the GPU it occupies while running, in (0, 1]
    host_s: float  # eager host time (dispatch + launch)


@dataclass(frozen=True)
class Precision:
    """Which math the kernels use: PyTorch's defaults are TF32 for cuDNN convolutions
    (``torch.backends.cudnn.allow_tf32 = True``) and full FP32 for matmuls
    (``torch.backends.cuda.matmul.allow_tf32 = False``)."""

    tf32_conv: bool = True
    tf32_matmul: bool = False


def _peak(profile: DeviceProfile, cls: str, dtype: str | None, precision: Precision) -> float:
    low = dtype in ("float16", "bfloat16")
    if cls in ("conv", "matmul"):
        if low:
            return profile.fp16_flops
        tf32 = precision.tf32_conv if cls == "conv" else precision.tf32_matmul
        if dtype == "float32" and tf32:
            return profile.tf32_flops
    return profile.fp32_flops


def op_cost(
    op: Mapping[str, Any], profile: DeviceProfile, precision: Precision = Precision()
) -> OpCost:
    """Cost of one node from its measured ``ops`` entry (kind, flops, bytes, elems, dtype,
    class)."""
    if op.get("kind") != "kernel":
        return OpCost(kernel=False, solo_s=0.0, width=0.0, host_s=profile.eager_view_s)
    elems = max(int(op.get("elems", 0)), 1)
    flops = max(float(op.get("flops", 0.0)), float(elems))  # elementwise: ~1 FLOP per element
    nbytes = float(op.get("bytes", 0.0))
    peak = _peak(profile, str(op.get("class", "other")), op.get("dtype"), precision)
    work = max(flops / (peak * profile.efficiency), nbytes / (profile.mem_bw * profile.efficiency))
    slots = profile.num_sms * profile.threads_per_sm
    threads = max(elems, int(op.get("in_elems", 0)) / _INPUTS_PER_THREAD)
    width = min(1.0, max(threads / slots, 1.0 / slots))
    solo = max(profile.min_kernel_s, work / width)
    return OpCost(kernel=True, solo_s=solo, width=width, host_s=profile.eager_op_s)


def op_costs(
    ops: Mapping[str, Mapping[str, Any]], profile: DeviceProfile, precision: Precision | None = None
) -> dict[str, OpCost]:
    prec = precision or Precision()
    return {name: op_cost(op, profile, prec) for name, op in ops.items()}


def with_overrides(profile: DeviceProfile, **changes: Any) -> DeviceProfile:
    """A copy of ``profile`` with some figures changed (for sensitivity studies)."""
    return replace(profile, **changes)
