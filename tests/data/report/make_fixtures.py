"""Writes the hand-made report fixtures in this folder (see README.md: nothing here is measured).

Each fixture is a scenario whose headline values (step time, shares, sizes, findings) were chosen
by hand to look like the run it stands for; the per-step series and utilization samples are
synthesised from those values with a fixed seed, and the summary statistics (median, p10, p90,
mean, breakdown) are then *computed from the series*, so every fixture is internally consistent
and the tests can recompute what the renderers must print.

    python tests/data/report/make_fixtures.py     # rewrites the *.json files next to this script
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def quantile(xs: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), so tests can recompute it."""
    s = sorted(xs)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def base(
    script: str, argv: list[str], device: str, gpus: list[dict[str, Any]], cpu_count: int
) -> dict[str, Any]:
    return {
        "schema": "gpuopt.profile/1",
        "source": "run",
        "status": "ok",
        "exit_code": 0,
        "script": script,
        "argv": argv,
        "cwd": "/home/ml/projects/segmenter",
        "started_at": "2025-03-14T09:26:53Z",
        "wall_s": None,
        "environment": {
            "python": "3.11.9",
            "torch": "2.5.1+cu124" if device == "cuda" else "2.5.1+cpu",
            "device": device,
            "gpus": gpus,
            "cpu_count": cpu_count,
        },
        "steps": {
            "count": 0,
            "measured": 0,
            "warmup": 0,
            "time_s": {"median": None, "p10": None, "p90": None, "mean": None},
            "series": [],
        },
        "breakdown": {"data_wait": 0.0, "h2d": 0.0, "sync": 0.0, "compute": 0.0, "other": 0.0},
        "utilization": {
            "gpu": None,
            "cpu": {"mean": None, "max": None},
            "samples": 0,
            "timeline": None,
        },
        "transfers": [],
        "syncs": [],
        "dispatch": {"ops_per_step": None, "mean_op_us": None},
        "loops": [],
        "findings": [],
        "gpu": None,
        "ranks": None,
        "tables": [],
        "warnings": [],
    }


def fill_steps(
    doc: dict[str, Any],
    rng: random.Random,
    n: int,
    warmup: int,
    step_s: float,
    shares: dict[str, float],
    jitter: float,
    start: float = 1.2,
) -> None:
    """Series of ``n`` steps (``warmup`` first ones slower), then stats and breakdown from it."""
    series = []
    t = start
    for i in range(n):
        w = i < warmup
        total = step_s * (rng.uniform(2.5, 4.0) if w else rng.uniform(1 - jitter, 1 + jitter))
        if not w and rng.random() < 0.04:
            total *= rng.uniform(1.6, 2.2)  # an occasional slow step, as real runs have
        rec = {"index": i, "start_s": round(t, 4), "time_s": round(total, 5), "warmup": w}
        for key in ("data_wait", "h2d", "sync"):
            rec[f"{key}_s"] = round(total * shares.get(key, 0.0) * rng.uniform(0.85, 1.15), 5)
        series.append(rec)
        t += total
    measured = [r for r in series if not r["warmup"]]
    times = [r["time_s"] for r in measured]
    doc["steps"] = {
        "count": n,
        "measured": len(measured),
        "warmup": warmup,
        "time_s": {
            "median": round(statistics.median(times), 6),
            "p10": round(quantile(times, 0.1), 6),
            "p90": round(quantile(times, 0.9), 6),
            "mean": round(statistics.fmean(times), 6),
        },
        "series": series,
    }
    total = sum(times)
    bd = {k: sum(r[f"{k}_s"] for r in measured) / total for k in ("data_wait", "h2d", "sync")}
    bd["other"] = shares.get("other", 0.0)
    bd["compute"] = 1.0 - sum(bd.values())
    doc["breakdown"] = {
        k: round(bd[k], 4) for k in ("data_wait", "h2d", "sync", "compute", "other")
    }
    doc["wall_s"] = round(t + 0.9, 3)


def fill_timeline(
    doc: dict[str, Any],
    rng: random.Random,
    interval: float,
    cpu: tuple[float, float],
    gpu: tuple[float, float] | None,
    rss: float,
    gpu_mem: float | None,
    n_gpus: int = 1,
) -> None:
    """Utilization as the runner writes it: PERCENT (0-100), summary, per-GPU means, timeline."""
    wall = doc["wall_s"] or 5.0
    n = int(wall / interval)
    t_s = [round(i * interval, 3) for i in range(n)]
    ramp = lambda i: min(1.0, i / 8)  # noqa: E731 - start-up: imports, model build
    cpu_v = [
        round(100 * min(1.0, max(0.0, rng.gauss(*cpu))) * (0.4 + 0.6 * ramp(i)), 2)
        for i in range(n)
    ]
    tl: dict[str, Any] = {
        "t_s": t_s,
        "cpu": cpu_v,
        "gpu": None,
        "rss_bytes": [int(rss * (0.5 + 0.5 * ramp(i)) + rng.randint(0, 2**24)) for i in range(n)],
        "gpu_memory_bytes": None,
    }
    cores = doc["environment"]["cpu_count"]
    doc["utilization"] = {
        "gpu": None,
        "cpu": {
            "mean": round(statistics.fmean(cpu_v), 2),
            "max": max(cpu_v),
            "cores_busy_mean": round(statistics.fmean(cpu_v) * cores / 100, 3),
        },
        "cpu_count": cores,
        "samples": n,
        "interval_s": interval,
        "timeline": tl,
    }
    if gpu is not None:
        # sawtooth: busy, then idle while the next batch is prepared
        tl["gpu"] = [
            round(
                100
                * min(1.0, max(0.0, rng.gauss(*gpu) if (i % 5) < 3 else rng.uniform(0.0, 0.15)))
                * ramp(i),
                2,
            )
            for i in range(n)
        ]
        tl["gpu_memory_bytes"] = [int((gpu_mem or 0) * n_gpus * ramp(i)) for i in range(n)]
        mean = round(statistics.fmean(tl["gpu"]), 2)
        doc["utilization"]["gpu"] = {"mean": mean, "max": max(tl["gpu"])}
        doc["utilization"]["gpus"] = [
            {
                "index": i,
                "util_mean": round(mean + rng.uniform(-2, 2), 2),
                "memory_used_max_bytes": int(gpu_mem or 0),
                "power_w_mean": round(rng.uniform(280, 420), 1),
                "sm_clock_mhz_mean": round(rng.uniform(1700, 1980)),
                "process_util_mean": round(mean + rng.uniform(-3, 0), 2),
            }
            for i in range(n_gpus)
        ]


def cpu_dataloader_bound() -> dict[str, Any]:
    rng = random.Random(1)
    doc = base(
        "train_mnist.py", ["train_mnist.py", "--epochs", "1", "--batch-size", "256"], "cpu", [], 8
    )
    fill_steps(
        doc,
        rng,
        42,
        2,
        0.2315,
        {"data_wait": 0.68, "h2d": 0.0, "sync": 0.012, "other": 0.021},
        0.08,
    )
    fill_timeline(doc, rng, 0.1, (0.22, 0.05), None, 1.9 * 2**30, None)
    doc["utilization"]["note"] = "no NVIDIA GPU/NVML: GPU utilization not measured"
    doc["steps"]["marked_by"] = ["optimizer.step"]
    doc["stopped_by_steps"] = True
    doc["dataloaders"] = [
        {
            "site": "train_mnist.py:40",
            "class": "DataLoader",
            "dataset": "MNIST",
            "batch_size": 256,
            "num_workers": 0,
            "pin_memory": False,
            "persistent_workers": False,
            "prefetch_factor": None,
            "multiprocessing_context": None,
            "epochs": 1,
            "batches": 43,
            "wait_s_total": round(sum(r["data_wait_s"] for r in doc["steps"]["series"]), 4),
            "wait_s_per_step": round(
                doc["breakdown"]["data_wait"] * doc["steps"]["time_s"]["mean"], 5
            ),
        }
    ]
    dw = doc["breakdown"]["data_wait"]
    median = doc["steps"]["time_s"]["median"]
    doc["syncs"] = [
        {
            "kind": "item",
            "site": "train_mnist.py:61",
            "count_per_step": 1,
            "would_block_on_gpu": True,
        },
        {
            "kind": "tolist",
            "site": "metrics.py:18",
            "count_per_step": 2,
            "would_block_on_gpu": True,
        },
    ]
    doc["dispatch"] = {
        "ops_per_step": 412,
        "mean_op_us": 38.5,
        "between_ops_share": 0.061,
        "recorder_overhead_us_per_op": 2.1,
        "window_steps": 3,
    }
    doc["findings"] = [
        {
            "id": "dataloader-bound",
            "severity": "high",
            "title": "Each step waits for the DataLoader",
            "site": "train_mnist.py:54",
            "evidence": {
                "summary": (
                    f"{dw * 100:.0f}% of step time is spent in next(iter(loader)); "
                    "num_workers=0 on 8 CPU cores"
                ),
                "data_wait_share": dw,
                "data_wait_s_per_step": round(dw * median, 5),
                "num_workers": 0,
                "cpu_count": 8,
            },
            "fix": (
                "DataLoader(..., num_workers=6, pin_memory=True, persistent_workers=True, "
                "prefetch_factor=4)"
            ),
            "est_speedup": round(1 / (1 - dw * 0.9), 3),
            "estimate_model": "Amdahl: 90% of the data-wait share removed by parallel loading",
        },
        {
            "id": "sync-in-step",
            "severity": "low",
            "title": "loss.item() every step forces a host-device sync",
            "site": "train_mnist.py:61",
            "evidence": {
                "summary": (
                    "3 sync calls per step (item, tolist); "
                    "cheap on this CPU-only run but each would block on a GPU"
                ),
                "syncs_per_step": 3,
                "sync_share": doc["breakdown"]["sync"],
            },
            "fix": (
                "Accumulate the loss on the device (running += loss.detach()) "
                "and call .item() every 50 steps"
            ),
            "est_speedup": round(1 / (1 - doc["breakdown"]["sync"]), 3),
            "estimate_model": "Amdahl: sync share removed",
        },
    ]
    doc["warnings"] = ["GPU sampler not started: no NVIDIA GPU/NVML"]
    return doc


def host_culprits() -> dict[str, Any]:
    rng = random.Random(2)
    gpus = [{"name": "NVIDIA A100-SXM4-80GB", "memory_bytes": 85899345920}]
    doc = base("seg/train.py", ["seg/train.py", "--config", "configs/coco.yaml"], "cuda", gpus, 32)
    fill_steps(
        doc, rng, 64, 3, 0.3874, {"data_wait": 0.06, "h2d": 0.14, "sync": 0.22, "other": 0.04}, 0.05
    )
    fill_timeline(doc, rng, 0.1, (0.31, 0.06), (0.78, 0.08), 6.3 * 2**30, 41.2 * 2**30)
    bd = doc["breakdown"]
    doc["transfers"] = [
        {
            "direction": "h2d",
            "site": "seg/train.py:88",
            "count_per_step": 2,
            "bytes_per_step": 2 * 16 * 3 * 512 * 512 * 4,
            "pinned": False,
            "non_blocking": False,
        },
        {
            "direction": "h2d",
            "site": "seg/masks.py:41",
            "count_per_step": 80,
            "bytes_per_step": 80 * 16 * 512 * 512,
            "pinned": False,
            "non_blocking": False,
        },
        {
            "direction": "d2h",
            "site": "seg/metrics.py:27",
            "count_per_step": 1,
            "bytes_per_step": 16 * 81 * 4,
            "pinned": False,
            "non_blocking": False,
        },
        {
            "direction": "d2d",
            "site": "seg/model.py:133",
            "count_per_step": 4,
            "bytes_per_step": 4 * 2**20,
            "pinned": None,
            "non_blocking": True,
        },
    ]
    doc["syncs"] = [
        {"kind": "item", "site": "seg/train.py:102", "count_per_step": 3},
        {"kind": "nonzero", "site": "seg/masks.py:45", "count_per_step": 80},
        {"kind": "tolist", "site": "seg/metrics.py:27", "count_per_step": 1},
        {"kind": "blocking_copy", "site": "seg/train.py:88", "count_per_step": 2},
    ]
    doc["loops"] = [{"site": "seg/masks.py:39", "ops_per_step": 480, "iterations_per_step": 80}]
    doc["dispatch"] = {
        "ops_per_step": 2316,
        "mean_op_us": 21.7,
        "between_ops_share": 0.27,
        "recorder_overhead_us_per_op": 3.4,
        "window_steps": 3,
    }
    doc["ragged"] = {
        "batches": 64,
        "steps_observed": 64,
        "distinct_shapes": 1,
        "new_shape_share": 0.0156,
        "batch_size": 16,
        "batch_sizes": [16],
        "variable_dims": [],
        "variable_batch_size": False,
        "list_batches": 0,
        "batch_size_1_variable": False,
        "pad_fraction": 0.0,
        "pad_tensor": "batch.mask",
        "padded_batches_scanned": 3,
        "top_shapes": [
            {"shapes": "batch.image: 16x3x512x512, batch.mask: 16x512x512", "batches": 64}
        ],
        "step_signatures_distinct": 1,
        "step_signatures_steps": 3,
    }
    median = doc["steps"]["time_s"]["median"]
    doc["findings"] = [
        {
            "id": "sync-in-step",
            "severity": "high",
            "title": "80 nonzero() calls per step stall the GPU",
            "site": "seg/masks.py:45",
            "evidence": {
                "summary": (
                    f"{bd['sync'] * 100:.0f}% of step time waits in host-device syncs; "
                    "86 syncs per step, 80 of them nonzero() in the mask loop"
                ),
                "sync_share": bd["sync"],
                "syncs_per_step": 86,
                "sync_s_per_step": round(bd["sync"] * median, 5),
            },
            "fix": (
                "Replace the per-class nonzero() with a boolean mask: "
                "masks = seg[:, None] == torch.arange(80, device=seg.device)[None, :, None, None]"
            ),
            "est_speedup": round(1 / (1 - bd["sync"] * 0.9), 3),
            "estimate_model": "Amdahl: 90% of the sync share removed",
        },
        {
            "id": "pageable-h2d",
            "severity": "medium",
            "title": "Host→device copies from pageable memory",
            "site": "seg/train.py:88",
            "evidence": {
                "summary": "82 copies (416 MiB) per step from pageable memory, all blocking",
                "h2d_share": bd["h2d"],
                "bytes_per_step": 2 * 16 * 3 * 512 * 512 * 4 + 80 * 16 * 512 * 512,
                "copies_per_step": 82,
            },
            "fix": "DataLoader(pin_memory=True) and images.to(device, non_blocking=True)",
            "est_speedup": round(1 / (1 - bd["h2d"] * 0.6), 3),
            "estimate_model": "pinned copies ~2.5x faster (PCIe 4 x16), overlap not counted",
        },
        {
            "id": "loop-indexing",
            "severity": "medium",
            "title": "Python loop over 80 classes issues 480 small ops per step",
            "site": "seg/masks.py:39",
            "evidence": {
                "summary": "for c in range(80): 6 ops each; one broadcast comparison does the same",
                "ops_per_step": 480,
                "iterations_per_step": 80,
                "mean_op_us": 21.7,
            },
            "fix": (
                "masks = (seg.unsqueeze(1) == classes.view(1, -1, 1, 1))  # (N, 80, H, W) in one op"
            ),
            "est_speedup": 1.09,
            "estimate_model": "dispatch time of the loop's ops (ops × mean_op_us) removed",
        },
        {
            "id": "launch-bound",
            "severity": "medium",
            "title": "27% of the step is spent between ops",
            "site": None,
            "evidence": {
                "summary": "2,316 ops per step at 21.7 µs each on the host; GPU kernels are short",
                "between_ops_share": 0.27,
                "ops_per_step": 2316,
            },
            "fix": 'torch.compile(model, mode="reduce-overhead") (CUDA graphs), or larger batches',
            "est_speedup": 1.21,
            "estimate_model": "half of the between-ops share removed",
        },
        {
            "id": "blocking-h2d",
            "severity": "low",
            "title": "Blocking copy of the batch to the GPU",
            "site": "seg/train.py:88",
            "evidence": {
                "summary": "x.to('cuda') without non_blocking=True waits for the copy each step",
                "copies_per_step": 2,
            },
            "fix": "x = x.to(device, non_blocking=True) (with pin_memory=True in the DataLoader)",
            "est_speedup": 1.03,
            "estimate_model": "copy time overlapped with the previous step's compute",
        },
    ]
    return doc


def gpu_ranks() -> dict[str, Any]:
    rng = random.Random(3)
    gpus = [{"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 85520809984}] * 4
    doc = base("train_ddp.py", ["train_ddp.py", "--model", "vit_b_16"], "cuda", gpus, 64)
    fill_steps(
        doc,
        rng,
        120,
        2,
        0.1482,
        {"data_wait": 0.03, "h2d": 0.02, "sync": 0.05, "other": 0.17},
        0.04,
    )
    fill_timeline(doc, rng, 0.25, (0.45, 0.08), (0.84, 0.05), 11.5 * 2**30, 61.0 * 2**30, n_gpus=4)
    median = doc["steps"]["time_s"]["median"]
    doc["gpu"] = []
    doc["ranks"] = []
    for r in range(4):
        slow = 1.19 if r == 3 else 1.0
        idle = [7.8, 8.3, 7.1, 19.6][r]
        comp = [81.4, 80.9, 82.0, 70.2][r]
        doc["gpu"].append(
            {
                "rank": r,
                "device": "NVIDIA H100 80GB HBM3",
                "utilization": round(1 - idle / 100, 3),
                "idle_pct": idle,
                "compute_pct": comp,
                "non_compute_pct": round(100 - idle - comp, 1),
                "idle_us": {
                    "host_wait": round(idle * 1000 * 0.62 * median, 1),
                    "kernel_wait": round(idle * 1000 * 0.23 * median, 1),
                    "other": round(idle * 1000 * 0.15 * median, 1),
                },
                "launch": {
                    "count": 1893,
                    "delay_median_us": [11.2, 11.6, 10.9, 14.8][r],
                    "short_kernels": 611,
                },
                "memcpy": {
                    "count": 14,
                    "time_us": [1830.5, 1812.0, 1851.7, 1799.3][r],
                    "bytes": 2 * 64 * 3 * 224 * 224 * 4,
                },
                "comm_overlap_pct": [63.5, 61.2, 64.8, 38.1][r],
            }
        )
        doc["ranks"].append(
            {
                "rank": r,
                "dir": f"rank-{r}",
                "status": "ok",
                "steps": 120,
                "step_time_median_s": round(median * slow, 5),
                "breakdown": {
                    "data_wait": [0.031, 0.029, 0.033, 0.176][r],
                    "h2d": 0.02,
                    "sync": 0.05,
                    "compute": [0.73, 0.732, 0.728, 0.604][r],
                    "other": 0.0,
                },
                "collective_s_per_step": [0.0212, 0.0219, 0.0208, 0.0047][r],
            }
        )
    for rk in doc["ranks"]:
        b = rk["breakdown"]
        b["other"] = round(1 - b["data_wait"] - b["h2d"] - b["sync"] - b["compute"], 4)
    doc["rank_spread"] = {"slowest_rank": 3, "fastest_rank": 0, "ratio": 1.19}
    gmean = doc["utilization"]["gpu"]["mean"]
    doc["findings"] = [
        {
            "id": "straggler-rank",
            "severity": "medium",
            "title": "Rank 3 is 19% slower; the other ranks wait for it in all-reduce",
            "site": "train_ddp.py:77",
            "evidence": {
                "summary": (
                    "rank 3 step median 19% above the others; "
                    "its data wait is 17.6% vs ~3% elsewhere"
                ),
                "slowest_rank": 3,
                "slowdown": 1.19,
                "data_wait_share_rank3": 0.176,
            },
            "fix": (
                "Give rank 3 the same DataLoader workers as the others (num_workers is computed "
                "from os.cpu_count() // local_world_size and rank 3's node has fewer cores)"
            ),
            "est_speedup": 1.16,
            "estimate_model": "all ranks at the median of the others",
        },
        {
            "id": "low-gpu-util",
            "severity": "low",
            "title": f"GPU busy {gmean:.0f}% of the sampled time",
            "site": None,
            "evidence": {
                "summary": (
                    f"mean GPU utilization {gmean:.0f}% (NVML samples); "
                    "a sawtooth: busy, then idle between steps"
                ),
                "gpu_util_mean_pct": gmean,
            },
            "fix": (
                "Fix the straggler first; "
                "then overlap the gradient all-reduce (DDP bucket_cap_mb=100)"
            ),
            "est_speedup": None,
            "estimate_model": None,
        },
    ]
    return doc


def failed_run() -> dict[str, Any]:
    doc = base(
        "train_big.py",
        ["train_big.py", "--batch-size", "512"],
        "cuda",
        [{"name": "NVIDIA A10G", "memory_bytes": 23836033024}],
        8,
    )
    doc["status"] = "error"
    doc["exit_code"] = 1
    doc["wall_s"] = 14.83
    doc["error"] = {
        "type": "torch.OutOfMemoryError",
        "message": (
            "CUDA out of memory. Tried to allocate 3.00 GiB. "
            "GPU 0 has a total capacity of 22.19 GiB of which 1.21 GiB is free."
        ),
    }
    doc["utilization"] = {
        "gpu": None,
        "cpu": {"mean": None, "max": None},
        "samples": 0,
        "timeline": None,
        "note": "the run ended before the first sample",
    }
    doc["warnings"] = ["the script failed before its first training step; no step statistics"]
    return doc


def trace_doc() -> dict[str, Any]:
    doc = base(
        "worker0.1623143089861.pt.trace.json.gz",
        [],
        "cuda",
        [{"name": "Tesla V100-DGXS-32GB", "memory_bytes": 34089730048}],
        0,
    )
    doc["source"] = "trace"
    del doc["cwd"], doc["started_at"]  # a trace does not say where or when it was recorded
    doc["environment"] = {
        "python": None,
        "torch": None,
        "device": "cuda",
        "gpus": [{"name": "Tesla V100-DGXS-32GB", "memory_bytes": 34089730048}],
        "cpu_count": None,
    }
    times = [0.1293, 0.1288, 0.1301, 0.1297, 0.1305]
    doc["steps"] = {
        "count": 5,
        "measured": 5,
        "warmup": 0,
        "time_s": {
            "median": statistics.median(times),
            "p10": round(quantile(times, 0.1), 6),
            "p90": round(quantile(times, 0.9), 6),
            "mean": round(statistics.fmean(times), 6),
        },
        "series": [
            {
                "index": i,
                "start_s": round(sum(times[:i]), 4),
                "time_s": t,
                "data_wait_s": round(t * 0.41, 5),
                "h2d_s": round(t * 0.05, 5),
                "sync_s": 0.0,
                "warmup": False,
            }
            for i, t in enumerate(times)
        ],
    }
    doc["breakdown"] = {"data_wait": 0.41, "h2d": 0.05, "sync": 0.0, "compute": 0.49, "other": 0.05}
    doc["utilization"] = {
        "gpu": {"mean": 49.3, "max": 49.3},
        "cpu": {"mean": None, "max": None},
        "samples": 0,
        "timeline": None,
        "note": "from the trace: GPU busy time / span; CPU utilization is not in a trace",
    }
    doc["dispatch"] = {"ops_per_step": None, "mean_op_us": None}
    doc["gpu"] = [
        {
            "rank": 0,
            "device": "Tesla V100-DGXS-32GB",
            "utilization": 0.493,
            "idle_pct": 50.7,
            "compute_pct": 43.9,
            "non_compute_pct": 5.4,
            "idle_us": {"host_wait": 301234.5, "kernel_wait": 8123.0, "other": 17890.2},
            "launch": {"count": 8772, "delay_median_us": 9.1, "short_kernels": 3120},
            "memcpy": {"count": 30, "time_us": 31890.0, "bytes": 361267200},
            "comm_overlap_pct": None,
        }
    ]
    doc["tables"] = [
        {
            "id": "top-kernels",
            "title": "Top GPU kernels by total time",
            "columns": ["kernel", "calls", "total_us", "mean_us", "share"],
            "rows": [
                ["volta_scudnn_128x128_relu_interior_nn_v1", 1590, 150823.4, 94.86, 0.232],
                [
                    "void at::native::vectorized_elementwise_kernel<4, "
                    "at::native::CUDAFunctor_add<float>>",
                    3210,
                    61234.1,
                    19.08,
                    0.094,
                ],
                ["volta_sgemm_128x64_nn", 318, 40017.9, 125.84, 0.061],
                [
                    "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>",
                    1590,
                    38880.0,
                    24.45,
                    0.06,
                ],
            ],
            "note": "kernels from the GPU stream; share of total kernel time",
        },
        {
            "id": "idle",
            "title": "Idle time by cause (HTA-style)",
            "columns": ["stream", "host_wait_us", "kernel_wait_us", "other_us"],
            "rows": [[7, 301234.5, 8123.0, 17890.2], [20, None, 0.0, 12.5]],
            "note": "",
        },
    ]
    doc["transfers"] = [
        {
            "direction": "h2d",
            "site": None,
            "count_per_step": 6.0,
            "bytes_per_step": 72253440.0,
            "pinned": False,
            "non_blocking": False,
            "time_us_per_step": 6378.0,
            "bandwidth_gbps": 11.329,
        },
        {
            "direction": "d2h",
            "site": None,
            "count_per_step": 1.0,
            "bytes_per_step": 4.0,
            "pinned": False,
            "non_blocking": False,
            "time_us_per_step": 2.1,
            "bandwidth_gbps": 0.002,
        },
    ]
    doc["syncs"] = [
        {
            "kind": "item",
            "site": None,
            "count_per_step": 1.0,
            "api": "cudaMemcpyAsync",
            "op": "aten::item",
            "time_us_per_step": 412.5,
        }
    ]
    doc["trace"] = {
        "path": "worker0.1623143089861.pt.trace.json.gz",
        "load_s": 0.412,
        "analyze_s": 0.095,
        "filtered_last_step": True,
        "note": "Definitions follow Holistic Trace Analysis 0.5",
        "ranks": [],
        "straggler": None,
    }
    doc["findings"] = [
        {
            "id": "dataloader-bound",
            "severity": "high",
            "title": "The GPU waits for the next batch 41% of each step",
            "site": None,
            "evidence": {
                "summary": (
                    "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__ "
                    "takes 41% of each ProfilerStep"
                ),
                "data_wait_share": 0.41,
            },
            "fix": "DataLoader(num_workers=4, pin_memory=True)",
            "est_speedup": 1.586,
            "estimate_model": "Amdahl: 90% of the data-wait share removed",
        }
    ]
    doc["warnings"] = []
    doc["wall_s"] = None
    return doc


def hostile() -> dict[str, Any]:
    doc = host_culprits()
    xss = '<script>alert("x")</script>'
    doc["script"] = f"evil{xss}&amp;\"quoted\" 'single' ünïcødé 训练.py"
    doc["argv"] = [doc["script"], "--name", '"><img src=x onerror=alert(1)>', "a|b", "`tick`"]
    doc["cwd"] = '/home/ml/we ird "dir"/<x>&y'
    doc["environment"]["gpus"] = [{"name": 'GPU <b>bold</b> & "q"', "memory_bytes": 1024}]
    doc["transfers"][0]["site"] = f"data/{xss}.py:12"
    doc["syncs"][0]["site"] = 'a"onmouseover="alert(1).py:7'
    doc["syncs"][1]["kind"] = "item\x1b[31mRED\x1b[0m"
    doc["loops"][0]["site"] = "javascript:alert(1)//x.py:3"
    f = doc["findings"][0]
    f["title"] = f"Title {xss} & <b>bold</b> | pipe"
    f["site"] = f"src/{xss}.py:9"
    f["evidence"] = {
        "summary": 'summary with </div><script>alert(2)</script> & "q" | pipe *stars* _u_',
        "weird<key>": "<v>",
    }
    f["fix"] = 'fix: use `x.to("cuda", non_blocking=True)` <!-- comment --> ]]> & </pre>'
    f["estimate_model"] = 'model "quoted" <script>m</script>'
    f["id"] = 'id"><script>alert(3)</script>'
    doc["tables"] = [
        {
            "id": '"><script>',
            "title": f"Table {xss}",
            "columns": ["<th>", "a|b", "ü"],
            "rows": [[xss, "x | y", 'q"uote'], [1.5, None, "&amp;"]],
            "note": f"note {xss}",
        }
    ]
    doc["warnings"] = [f'warning {xss} & "q"', "line1\nline2\rline3"]
    doc["utilization"]["note"] = f"note {xss}"
    return doc


FIXTURES = {
    "cpu_dataloader_bound": cpu_dataloader_bound,
    "host_culprits": host_culprits,
    "gpu_ranks": gpu_ranks,
    "failed_run": failed_run,
    "trace_tables": trace_doc,
    "hostile": hostile,
}


def main() -> None:
    for name, make in FIXTURES.items():
        doc = make()
        (HERE / f"{name}.json").write_text(
            json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        print(f"wrote {name}.json")


if __name__ == "__main__":
    main()
