"""The Ring-AllReduce model (an ESTIMATE, labelled as one wherever it is shown).

In a ring all-reduce of ``B`` bytes over ``N`` ranks, each rank sends and receives
``2(N-1)/N * B`` bytes (a reduce-scatter, then an all-gather, each ``N-1`` steps of ``B/N``), so
a link of bandwidth ``W`` cannot finish it faster than ``2(N-1)/N * B / W``. The *bus bandwidth*
``2(N-1)/N * B / t`` of a measured time ``t`` is therefore comparable with the link's nominal
bandwidth whatever ``N`` is (nccl-tests reports the same figure as ``busbw``).

``t`` must be time spent communicating, not waiting for a slower rank: per DDP bucket, the time
on the rank that arrived last (the others' longer times are waiting for it), summed over the
buckets. Over several bucket sizes, ``t = latency + bytes / bandwidth`` is fitted too: a large
latency times many buckets is the cost of "too many small buckets".
"""

from __future__ import annotations

from gpuopt.model.profile import GpuInfo, RingAllReduce

MODEL = (
    "Ring-AllReduce: bus bandwidth = 2(N-1)/N x bytes / time; time = each bucket's all-reduce "
    "on the rank that arrived last, summed over the buckets"
)
# Nominal per-GPU, per-direction bandwidth of the link between GPUs of one node, GB/s
# (vendor data sheets: NVLink generation x links; PCIe x16 per direction). Matched on the GPU's
# name as NVML reports it; the first match wins (PCIe names before SXM ones).
NOMINAL_LINKS: tuple[tuple[str, float, str], ...] = (
    ("pcie", 32.0, "PCIe 4.0 x16, per direction (a PCIe card; NVLink bridges not detected)"),
    ("b200", 900.0, "NVLink 5 (18 links), per direction"),
    ("b100", 900.0, "NVLink 5 (18 links), per direction"),
    ("h200", 450.0, "NVLink 4 (18 links), per direction"),
    ("h100", 450.0, "NVLink 4 (18 links), per direction"),
    ("a100", 300.0, "NVLink 3 (12 links), per direction"),
    ("v100", 150.0, "NVLink 2 (6 links), per direction"),
)


def nominal_link(
    backend: str | None, gpus: list[GpuInfo], nodes: int
) -> tuple[float | None, str | None]:
    """``(GB/s, what it is)`` of the link the ranks all-reduce over, where gpuopt knows it: NCCL
    within one node of known GPUs. Between nodes (the network) and for CPU backends (gloo over
    TCP): unknown."""
    if backend is None or backend.lower() != "nccl":
        return None, None
    if nodes != 1 or not gpus:
        return None, None
    name = gpus[0].name.lower()
    for needle, gbps, what in NOMINAL_LINKS:
        if needle in name:
            return gbps, f"{gpus[0].name}: {what}"
    return None, None


def fit_latency(sizes: list[int], times: list[float]) -> tuple[float | None, float | None]:
    """Least squares ``time = latency + bytes / bandwidth`` over the buckets: ``(latency s,
    bandwidth GB/s)``; None where fewer than two distinct sizes or the fit is not physical."""
    pairs = [(float(b), t) for b, t in zip(sizes, times, strict=True) if t > 0]
    if len({b for b, _ in pairs}) < 2:
        return None, None
    n = len(pairs)
    mb = sum(b for b, _ in pairs) / n
    mt = sum(t for _, t in pairs) / n
    var = sum((b - mb) ** 2 for b, _ in pairs)
    slope = sum((b - mb) * (t - mt) for b, t in pairs) / var
    latency = mt - slope * mb
    if slope <= 0:
        return None, None
    return max(latency, 0.0), 1.0 / slope / 1e9


def ring_allreduce(
    world_size: int,
    bucket_bytes: list[int],
    bucket_time_s: list[float],
    nominal: tuple[float | None, str | None] = (None, None),
) -> RingAllReduce | None:
    """The model's figures for one gradient all-reduce round (None: nothing to model)."""
    total = sum(bucket_bytes)
    t = sum(bucket_time_s)
    if world_size < 2 or total <= 0 or t <= 0:
        return None
    algo = total / t / 1e9
    bus = 2 * (world_size - 1) / world_size * algo
    gbps, what = nominal
    latency, bandwidth = fit_latency(bucket_bytes, bucket_time_s)
    return RingAllReduce(
        model=MODEL,
        world_size=world_size,
        bytes=total,
        time_s=t,
        algo_gbps=algo,
        bus_gbps=bus,
        buckets=len(bucket_bytes),
        nominal_gbps=gbps,
        nominal_source=what,
        efficiency=bus / gbps if gbps else None,
        latency_s=latency,
        bandwidth_gbps=bandwidth,
    )
