"""Profiles with a ``memory`` part, as the memory probe writes them (values of a GPU run and of
a prediction), for the rules' and the renderers' tests."""

from __future__ import annotations

from typing import Any

import msgspec

from gpuopt.model.profile import Profile

GiB = 1 << 30
MiB = 1 << 20


def split(**kw: int) -> dict[str, int]:
    out = dict.fromkeys(
        ("parameters", "gradients", "optimizer_state", "activations", "temporaries", "other"), 0
    )
    out.update(kw)
    return out


def predicted(batch: int, peak: int, per_sample: int, max_batch: int, **kw: Any) -> dict[str, Any]:
    return {
        "source": "fake-tensors",
        "batch_size": batch,
        "peak_bytes": peak,
        "by_category": kw.pop("by_category", split(parameters=peak // 4, activations=peak // 2)),
        "bytes_per_sample": per_sample,
        "max_batch_size": max_batch,
        "margin": 0.1,
        "limit": "activations and their gradients",
        **kw,
    }


def headroom_run() -> Profile:
    """A launch-bound GPU step at batch 16 using 2% of an H200 (../shared/gpu-h200's shape)."""
    return msgspec.convert(
        {
            "dispatch": {"host_dispatch_share": 0.455, "ops_per_step": 267},
            "dataloaders": [
                {
                    "site": "train.py:32",
                    "class": "DataLoader",
                    "dataset": "TensorDataset",
                    "batch_size": 16,
                    "num_workers": 0,
                    "pin_memory": False,
                    "persistent_workers": False,
                    "prefetch_factor": None,
                    "multiprocessing_context": None,
                    "epochs": 1,
                    "batches": 80,
                    "wait_s_total": 0.1,
                    "wait_s_per_step": 0.001,
                    "built_at": "train.py:30",
                }
            ],
            "memory": {
                "device": "NVIDIA H200",
                "capacity_bytes": 150109880320,
                "capacity_source": "device",
                "measured": {
                    "peak_allocated_bytes": int(1.79 * GiB),
                    "peak_reserved_bytes": 2 * GiB,
                    "by_category": split(parameters=40 * MiB, activations=int(1.6 * GiB)),
                    "largest": [
                        {"site": "train.py:19", "module": "Net", "bytes": 800 * MiB},
                    ],
                    "batch_size": 16,
                },
                "predicted": predicted(16, int(1.7 * GiB), 100 * MiB, 1300),
            },
        },
        Profile,
    )


def oom_run() -> Profile:
    """A run that died of OOM: the allocator's free blocks large, activations most of the peak."""
    return msgspec.convert(
        {
            "status": "error",
            "exit_code": 1,
            "error": {"type": "OutOfMemoryError", "message": "CUDA out of memory."},
            "memory": {
                "device": "a100-40gb",
                "capacity_bytes": 40 * GiB,
                "predicted": predicted(
                    64,
                    50 * GiB,
                    700 * MiB,
                    48,
                    by_category=split(
                        parameters=2 * GiB,
                        gradients=2 * GiB,
                        optimizer_state=16 * GiB,
                        activations=30 * GiB,
                    ),
                    largest=[
                        {"site": "model.py:40", "module": "blocks.3 (Block)", "bytes": 9 * GiB},
                        {"site": "model.py:40", "module": "blocks.2 (Block)", "bytes": 8 * GiB},
                    ],
                ),
                "oom": {
                    "site": "train.py:55",
                    "requested_bytes": 2 * GiB,
                    "held": [],
                    "fits_batch_size": 48,
                    "capacity_bytes": 40 * GiB,
                    "reserved_unallocated_bytes": 6 * GiB,
                },
            },
        },
        Profile,
    )


def fragmented_run() -> Profile:
    """A GPU run whose allocator reserved 9 GiB more than it allocated at its peak."""
    return msgspec.convert(
        {
            "memory": {
                "device": "NVIDIA H100 80GB HBM3",
                "capacity_bytes": 80 * GiB,
                "measured": {
                    "peak_allocated_bytes": 20 * GiB,
                    "peak_reserved_bytes": 29 * GiB,
                    "fragmentation_bytes": 9 * GiB,
                },
            },
        },
        Profile,
    )


def memory_profiles() -> list[Profile]:
    return [headroom_run(), oom_run(), fragmented_run()]
