"""Loading the hand-made report fixtures (tests/data/report, see its README) for the report tests."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data" / "report"
NAMES = (
    "cpu_dataloader_bound",
    "host_culprits",
    "gpu_ranks",
    "failed_run",
    "trace_tables",
    "hostile",
)
_CACHE: dict[str, dict[str, Any]] = {}


def fixture(name: str) -> dict[str, Any]:
    """A fresh copy of fixture ``name`` (renderers must not mutate it, but tests may)."""
    if name not in _CACHE:
        _CACHE[name] = json.loads((DATA / f"{name}.json").read_text(encoding="utf-8"))
    return copy.deepcopy(_CACHE[name])


def minimal_doc() -> dict[str, Any]:
    """Only the contract's required keys, every optional one absent and the rest null/empty."""
    return {
        "schema": "gpuopt.profile/1",
        "status": "ok",
        "exit_code": 0,
        "script": "x.py",
        "argv": [],
        "environment": {},
        "steps": {
            "count": 0,
            "measured": 0,
            "time_s": {"median": None, "p10": None, "p90": None, "mean": None},
        },
        "breakdown": {"data_wait": 0, "h2d": 0, "sync": 0, "compute": 0, "other": 0},
        "utilization": {"gpu": None, "cpu": None, "samples": 0},
        "transfers": [],
        "syncs": [],
        "dispatch": {},
        "loops": [],
        "findings": [],
        "gpu": None,
        "ranks": None,
    }
