"""Helpers for the trace tests: build small Kineto-format traces in code (exact, known numbers)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

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


def copy(
    name: str, ts: float, dur: float, corr: int, stream: int = 7, nbytes: int = 1 << 20
) -> dict[str, Any]:
    """A memcpy or memset on a stream (``name``: ``Memcpy HtoD (Pinned -> Device)``,
    ``Memset (Device)``...), with its byte count."""
    cat = "gpu_memset" if name.startswith("Memset") else "gpu_memcpy"
    return kernel(name, ts, dur, corr, stream=stream, cat=cat, bytes=nbytes)


# --------------------------------------------------------------------------- impossible numbers

# Keys whose numbers may be negative: timestamps and ids taken from the trace as they are.
_SIGNED_KEYS = {"start_us", "stream", "dropped_last_step"}
_FRACTION_KEYS = {"utilization", "data_wait", "h2d", "sync", "compute", "other"}


def impossible_numbers(doc: Any, path: str = "") -> list[str]:
    """Every number of a profile document (``msgspec.to_builtins(profile)``) that no trace can
    give: not finite, a negative time or count, a percentage outside [0, 100], a fraction
    (utilization, breakdown, shares) outside [0, 1]. Tables: columns named with '%' are
    percentages, every other number but a stream id is a time, a count or a size."""
    bad: list[str] = []
    if isinstance(doc, dict):
        if path.endswith(".tables[]") and "columns" in doc and "rows" in doc:
            return _impossible_in_table(doc, path)
        for k, v in doc.items():
            bad += impossible_numbers(v, f"{path}.{k}")
        return bad
    if isinstance(doc, list):
        for v in doc:
            bad += impossible_numbers(v, f"{path}[]")
        return bad
    if isinstance(doc, bool) or not isinstance(doc, (int, float)):
        return bad
    key = path.rsplit(".", 1)[-1].rstrip("[]")
    x = float(doc)
    if x != x or x in (float("inf"), float("-inf")):
        return [f"{path} = {doc}"]
    if x < 0 and key not in _SIGNED_KEYS:
        return [f"{path} = {doc} < 0"]
    is_pct = key.endswith("pct") or path.startswith(".utilization.gpu.")
    if is_pct and x > 100:
        return [f"{path} = {doc} > 100"]
    in_breakdown = ".breakdown." in path or path.startswith(".breakdown")
    if (key in _FRACTION_KEYS and (key == "utilization" or in_breakdown)) or "share" in key:
        if not is_pct and x > 1:
            return [f"{path} = {doc} > 1"]
    return bad


def _impossible_in_table(table: dict[str, Any], path: str) -> list[str]:
    bad: list[str] = []
    columns = table["columns"]
    for row in table["rows"]:
        for col, v in zip(columns, row, strict=True):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or col == "stream":
                continue
            x = float(v)
            where = f"{path}[{table['id']}].{col}"
            if x != x or x < 0 or ("%" in col and x > 100):
                bad.append(f"{where} = {v}")
    return bad
