"""Rules declare the Profile fields they read, and the declaration is honest: each rule, given a
profile holding only its declared fields (every other field at its empty default), finds exactly
what it finds in the whole profile — on every recorded document and fixture."""

from __future__ import annotations

import gzip
from pathlib import Path

import msgspec
import pytest
from conftest import ROOT
from memory_builders import memory_profiles
from profile_builders import loader, ragged

from gpuopt.findings.engine import Rule, registered_rules
from gpuopt.model.document import decode
from gpuopt.model.profile import Profile

DOCS = sorted((ROOT / "tests" / "data" / "report").glob("*.json")) + sorted(
    (ROOT / "tests" / "data" / "golden").glob("*/*.json.gz")
)


def _load(path: Path) -> Profile:
    raw = path.read_bytes()
    return decode(gzip.decompress(raw) if path.name.endswith(".gz") else raw, path.name)


def _crafted() -> list[Profile]:
    """Runs where the host rules that no recorded run triggers do fire (values as a recorder
    writes them): tiny ops, a pinned blocking copy, ragged batches with a per-sample loop."""
    shapes = ragged(
        batches=20,
        steps_observed=20,
        distinct_shapes=15,
        new_shape_share=0.75,
        batch_size=4,
        batch_sizes=[4],
        variable_dims=["batch[0] dim 1"],
        pad_fraction=0.5,
        pad_tensor="batch.mask",
        padded_batches_scanned=3,
    )
    doc = {
        "breakdown": {"compute": 0.8, "other": 0.2},
        "dispatch": {
            "ops_per_step": 400,
            "tiny_ops_per_step": 380,
            "host_dispatch_share": 0.6,
            "mean_op_us": 6.0,
            "step_time_us": 10000.0,
            "top_sites": [{"site": "m.py:7", "ops_per_step": 200, "time_share": 0.3}],
            "hand_written_ops": [
                {
                    "site": "m.py:9",
                    "kind": "gelu-tanh",
                    "code": "0.5 * x * (1.0 + torch.tanh(...))",
                    "replacement": 'F.gelu(x, approximate="tanh")',
                    "ops_per_step": 32,
                    "time_share": 0.1,
                }
            ],
        },
        "transfers": [
            {
                "direction": "h2d",
                "site": "t.py:2",
                "count_per_step": 2,
                "bytes_per_step": 8 << 20,
                "pinned": True,
                "non_blocking": False,
                "time_us_per_step": 900.0,
                "time_share": 0.09,
            }
        ],
        "loops": [
            {
                "site": "t.py:30",
                "ops_per_step": 40,
                "iterations_per_step": 4,
                "time_share": 0.2,
            }
        ],
        "ragged": shapes,
        "dataloaders": [loader("train.py:20", batch_size=4, pin_memory=True, wait_s_per_step=0.0)],
    }
    # a GPU job's DDP model with many small buckets on NVLink (values as the merge writes them)
    job = {
        "steps": {"count": 20, "measured": 18, "time_s": {"mean": 0.05, "median": 0.05}},
        "distributed": {
            "backend": "nccl",
            "world_size": 8,
            "rank": 0,
            "ddp": [
                {
                    "site": "train.py:40",
                    "buckets": 12,
                    "bucket_bytes": [2**18] * 12,
                    "bucket_time_s": [0.001] * 12,
                    "grad_bytes": 12 * 2**18,
                    "bucket_cap_bytes": 2**18,
                    "exposed_s_per_step": 0.01,
                }
            ],
            "ring": {
                "model": "Ring-AllReduce",
                "world_size": 8,
                "bytes": 12 * 2**18,
                "time_s": 0.012,
                "algo_gbps": 0.26,
                "bus_gbps": 0.46,
                "buckets": 12,
                "nominal_gbps": 450.0,
                "nominal_source": "NVIDIA H100: NVLink 4 (18 links), per direction",
                "efficiency": 0.001,
                "latency_s": 0.0008,
                "bandwidth_gbps": 1.3,
            },
        },
    }
    # a compiled run: a print break, a size recompile in a measured step, and more
    # than half of a short run spent compiling
    compiled = {
        "wall_s": 10.0,
        "steps": {
            "count": 10,
            "measured": 8,
            "warmup": 2,
            "time_s": {"mean": 0.05, "median": 0.05},
            "series": [{"index": i, "start_s": 0.05 * i, "time_s": 0.05} for i in range(10)],
        },
        "compile": {
            "backend": "inductor",
            "mode": "default",
            "compile_s": 5.0,
            "frames": 2,
            "graphs": 3,
            "graph_breaks": [
                {"site": "m.py:12", "reason": "Failed to trace builtin operator", "count": 2,
                 "kind": "print", "function": "forward"}
            ],
            "recompiles": [
                {"site": "m.py:10", "guard": "tensor 'x' size mismatch at index 1",
                 "reason": "0/0: tensor 'x' size mismatch at index 1. expected 8, actual 12",
                 "count": 1, "per_step": 0.1, "function": "forward", "steps": [5],
                 "compile_s": 0.4}
            ],
            "import_s": 1.0,
            "functions": [
                {"name": "forward", "site": "m.py:10", "frames": 2, "graphs": 3,
                 "graph_breaks": 1, "recompiles": 1, "compile_s": 5.0, "called_from": "m.py:30"}
            ],
        },
    }  # fmt: skip
    slow = {  # a step far slower than the others, past the warm-up, named
        "steps": {
            "count": 12, "measured": 10, "warmup": 2,
            "series": [
                {"index": i, "start_s": None, "time_s": 2.0 if i == 9 else 0.05, "warmup": i < 2}
                for i in range(12)
            ],
            "slow": [{"index": 9, "site": "t.py:40", "kind": "evaluation", "samples": 40,
                      "at_site": 38}],
        },
    }  # fmt: skip
    lightning = {
        "dispatch": {"between_ops_us_per_step": 7580.0, "step_time_us": 13000.0},
        "framework": {
            "name": "lightning",
            "version": "2.6.6",
            "entry": "t.py:45",
            "phases": [{"name": "train", "steps": 60}],
            "python_share": 0.49,
            "knobs_site": "t.py:43",
        },
    }
    return [
        msgspec.convert(doc, Profile),
        msgspec.convert(job, Profile),
        msgspec.convert(compiled, Profile),
        msgspec.convert(slow, Profile),
        msgspec.convert(lightning, Profile),
        *memory_profiles(),
    ]


def _only(profile: Profile, fields: tuple[str, ...]) -> Profile:
    return msgspec.structs.replace(Profile(), **{f: getattr(profile, f) for f in fields})


@pytest.mark.parametrize("rule", list(registered_rules().values()), ids=lambda r: r.name)
def test_a_rule_reads_only_what_it_declares(rule: Rule) -> None:
    fired = 0
    profiles = [(p.name, _load(p)) for p in DOCS] + [("crafted", p) for p in _crafted()]
    for name, profile in profiles:
        found = rule.fn(profile)
        fired += bool(found)
        assert rule.fn(_only(profile, rule.reads)) == found, f"{name}: reads undeclared fields"
    assert rule.reads, "a rule that reads nothing"
    assert fired, f"{rule.name} fires on no document: the check would mean nothing"


def test_undeclared_reads_are_caught() -> None:
    """The check itself: a rule that reads the breakdown without declaring it is caught."""
    from gpuopt.findings.rules import dataloader

    profile = _load(ROOT / "tests" / "data" / "report" / "cpu_dataloader_bound.json")
    shrunk = tuple(f for f in ("source", "dataloaders", "steps", "utilization", "environment"))
    assert dataloader.dataloader_bound(profile)
    assert dataloader.dataloader_bound(_only(profile, shrunk)) == []
