"""Loading the hand-made report fixtures (tests/data/report, see its README) for the report tests:
each is a valid typed document (:class:`gpuopt.model.profile.Profile`)."""

from __future__ import annotations

import json
from pathlib import Path

from gpuopt.model.document import decode
from gpuopt.model.profile import Profile

DATA = Path(__file__).resolve().parent / "data" / "report"
NAMES = (
    "cpu_dataloader_bound",
    "host_culprits",
    "gpu_ranks",
    "failed_run",
    "trace_tables",
    "hostile",
)
_CACHE: dict[str, bytes] = {}


def fixture_path(name: str) -> Path:
    return DATA / f"{name}.json"


def fixture(name: str) -> Profile:
    """A fresh, validated copy of fixture ``name`` (renderers must not mutate it, tests may)."""
    if name not in _CACHE:
        _CACHE[name] = fixture_path(name).read_bytes()
    return decode(_CACHE[name], str(fixture_path(name)))


MINIMAL = {
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
    "utilization": {"gpu": None, "cpu": {"mean": None, "max": None}, "samples": 0},
    "transfers": [],
    "syncs": [],
    "dispatch": {},
    "loops": [],
    "findings": [],
    "gpu": None,
    "ranks": None,
}


def minimal_doc() -> Profile:
    """Only the contract's required keys, every optional one absent and the rest null/empty."""
    return decode(json.dumps(MINIMAL), "minimal")
