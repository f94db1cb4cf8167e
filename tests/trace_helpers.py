"""Helpers for the trace tests: build small Kineto-format traces in code (exact, known numbers)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

SHARED_TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
MAIN_TID = 100


def cpu(
    name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = MAIN_TID, **args: Any
) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def launch(
    ts: float, dur: float, corr: int, name: str = "cudaLaunchKernel", tid: int = MAIN_TID
) -> dict[str, Any]:
    return cpu(name, ts, dur, cat="cuda_runtime", tid=tid, correlation=corr)


def kernel(
    name: str, ts: float, dur: float, corr: int, stream: int = 7, cat: str = "kernel", **args: Any
) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 0,
        "tid": f"stream {stream}",
        "ts": ts,
        "dur": dur,
        "args": {"device": 0, "stream": stream, "correlation": corr, **args},
    }


def write_trace(
    path: Path,
    events: list[dict[str, Any]],
    rank: int | None = 0,
    indent: int | None = 2,
    **meta: Any,
) -> Path:
    doc: dict[str, Any] = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "Test GPU", "totalGlobalMem": 1 << 34}],
    }
    if rank is not None:
        doc["distributedInfo"] = {"rank": rank, "world_size": 2}
    doc.update(meta)
    doc["traceEvents"] = events
    text = json.dumps(doc, indent=indent).encode()
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text))
    else:
        path.write_bytes(text)
    return path
