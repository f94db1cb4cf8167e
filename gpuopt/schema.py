"""The ``profile.json`` document (schema ``gpuopt.profile/1``): build, validate, read, write.

The profile document is gpuopt's *session* object: ``profile`` writes it, ``report`` re-renders it
without re-running anything, ``check``/``compare`` read two of them. It is plain JSON data (no
classes, nothing to unpickle), so every renderer and every later version can read it.

The keys listed in ``../shared/CONTRACT.md`` are required. gpuopt adds (all optional for readers):

``source``      "run" (``gpuopt profile``) or "trace" (``gpuopt report TRACE``)
``cwd``         the working directory the run started in (sites are relative to it)
``started_at``  ISO-8601 UTC time the run started; ``wall_s`` whole-run wall time in seconds
``steps.warmup``  warm-up steps left out of the statistics
``steps.series``  one record per step, warm-up included:
                  ``{index, start_s, time_s, data_wait_s, h2d_s, sync_s, warmup}``
                  (``start_s`` is seconds since the run started)
``utilization``  ``gpu.mean/max`` and ``cpu.mean/max`` are PERCENT (0–100): GPU as NVML reports it,
                CPU as the process tree's share of all usable cores (``cpu.cores_busy_mean`` in
                cores, ``cpu_count`` cores); ``gpus`` per-GPU means; ``interval_s``
``utilization.timeline``  ``{t_s: [...], cpu: [...], gpu: [... ] | null, rss_bytes: [...],
                  gpu_memory_bytes: [...] | null}`` sampled in the background
``utilization.note``  why a metric is missing (e.g. "no NVIDIA GPU/NVML: GPU utilization not measured")
``steps.marked_by``  what marked steps: "optimizer.step" and/or "gpuopt.step"
``stopped_by_steps``  true when ``--steps N`` ended the run
``dataloaders`` one entry per DataLoader seen: ``{site, class, dataset, batch_size, num_workers,
                pin_memory, persistent_workers, prefetch_factor, multiprocessing_context, epochs,
                batches, wait_s_total, wait_s_per_step}``
``gpu[].utilization``  a FRACTION (0–1) of the span with a kernel running; ``*_pct`` keys are 0–100
``ranks[].step_time_median_s``  median step time of that rank
``rank``        this process's rank under torchrun (null otherwise); ``rank_spread``
                ``{slowest_rank, fastest_rank, ratio}`` of median step times in a merged document
``transfers[]`` also ``src_device, dst_device, api, time_us_per_step, time_share``
``syncs[]``     also ``api, op, measured_device, would_block_on_gpu, time_us_per_step,
                idle_after_us_per_step, time_share, idle_after_share`` (``would_block_on_gpu``: a
                CPU-only run's site that would block on a GPU; see docs/host-culprits.md)
``dispatch``    also ``between_ops_share, h2d_share, sync_share, window_steps,
                recorder_overhead_us_per_op, step_time_source`` and more (docs/host-culprits.md)
``loops[]``     also ``kind, code, indexing_ops_per_step, ops_per_iteration, time_us_per_step, time_share``; ``through`` (helper lines) when a loop issues its ops through your functions
``ragged``      batch-shape statistics: ``batches, distinct_shapes, batch_sizes, variable_dims,
                pad_fraction, ...``
``steps.instrumented``  steps the recorder / profiler window slowed, left out of the statistics
``trace_files`` Kineto traces the GPU profiler window wrote (analysed into ``gpu``/``trace``)
``tables``      extra tables any analysis may add; every renderer shows them:
                ``[{id, title, columns: [str], rows: [[scalar]], note}]``
``warnings``    one-line notes shown to the user (e.g. a sampler that could not start)
``trace``       details from Kineto traces (``gpuopt report TRACE``, or the profiler window)
``error``       ``{type, message}`` when ``status`` is "error"
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from gpuopt.atomic_write import write_atomic  # noqa: F401  (re-exported until callers move)
from gpuopt.errors import GpuoptError

SCHEMA = "gpuopt.profile/1"
SCHEMA_FAMILY = "gpuopt.profile"
SCHEMA_VERSION = 1

REQUIRED_KEYS: tuple[str, ...] = (
    "schema",
    "status",
    "exit_code",
    "script",
    "argv",
    "environment",
    "steps",
    "breakdown",
    "utilization",
    "transfers",
    "syncs",
    "dispatch",
    "loops",
    "findings",
    "gpu",
    "ranks",
)
BREAKDOWN_KEYS: tuple[str, ...] = ("data_wait", "h2d", "sync", "compute", "other")
STATUSES = ("ok", "error", "interrupted")
SEVERITIES = ("high", "medium", "low")


def empty_profile(script: str = "", argv: list[str] | None = None) -> dict[str, Any]:
    """A valid document with nothing measured yet: what a run starts from and fills in."""
    return {
        "schema": SCHEMA,
        "source": "run",
        "status": "ok",
        "exit_code": 0,
        "script": script,
        "argv": list(argv or []),
        "environment": {
            "python": "",
            "torch": None,
            "device": "cpu",
            "gpus": [],
            "cpu_count": os.cpu_count() or 1,
        },
        "steps": {
            "count": 0,
            "measured": 0,
            "warmup": 0,
            "time_s": {"median": None, "p10": None, "p90": None, "mean": None},
            "series": [],
        },
        "breakdown": {k: 0.0 for k in BREAKDOWN_KEYS},
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


def validate_profile(doc: Any) -> list[str]:
    """Problems that make ``doc`` unusable as a ``gpuopt.profile/1`` document (empty: valid).

    Checks the contract's structure and value ranges, not every optional key.
    """
    if not isinstance(doc, dict):
        return ["not a JSON object"]
    problems: list[str] = []
    missing = [k for k in REQUIRED_KEYS if k not in doc]
    if missing:
        problems.append("missing keys: " + ", ".join(missing))
    if doc.get("status") not in STATUSES:
        problems.append(f"status must be one of {', '.join(STATUSES)}, not {doc.get('status')!r}")
    bd = doc.get("breakdown")
    if isinstance(bd, dict):
        values = [bd.get(k) for k in BREAKDOWN_KEYS]
        if any(not isinstance(v, (int, float)) or math.isnan(v) or v < 0 or v > 1 for v in values):
            problems.append("breakdown fractions must be numbers in [0, 1]")
        elif sum(values) > 0 and abs(sum(values) - 1) > 0.02:  # type: ignore[arg-type]
            problems.append(f"breakdown fractions sum to {sum(values):.3f}, not 1")  # type: ignore[arg-type]
    elif "breakdown" in doc:
        problems.append("breakdown must be an object")
    for key in ("transfers", "syncs", "loops", "findings"):
        if key in doc and not isinstance(doc[key], list):
            problems.append(f"{key} must be a list")
    for f in doc.get("findings") or []:
        if not isinstance(f, dict) or f.get("severity") not in SEVERITIES or not f.get("id"):
            problems.append("each finding needs an id and a severity of high, medium or low")
            break
    return problems


def check_schema_version(doc: Any, origin: str) -> None:
    """Refuse documents of another family or a newer version, with the fix in the message."""
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if not isinstance(schema, str) or "/" not in schema:
        raise GpuoptError(f"{origin}: not a gpuopt profile (no 'schema' key)")
    family, _, version = schema.rpartition("/")
    if family != SCHEMA_FAMILY:
        raise GpuoptError(f"{origin}: schema {schema!r} is not a gpuopt profile")
    try:
        v = int(version)
    except ValueError:
        raise GpuoptError(f"{origin}: unknown schema version {schema!r}") from None
    if v > SCHEMA_VERSION:
        raise GpuoptError(
            f"{origin}: schema {schema} is newer than this gpuopt reads ({SCHEMA}); "
            "upgrade gpuopt: pip install -U gpuopt"
        )
    if v < SCHEMA_VERSION:
        raise GpuoptError(
            f"{origin}: schema {schema} is older than {SCHEMA}; re-run gpuopt profile"
        )


def dumps(doc: Any) -> bytes:
    """Serialise a document (orjson: fast, and NaN/inf become null rather than invalid JSON)."""
    import orjson

    return orjson.dumps(
        doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
    )


def loads(data: bytes | str) -> Any:
    import orjson

    return orjson.loads(data)


def write_profile(doc: dict[str, Any], path: Path) -> None:
    write_atomic(path, dumps(doc))


def resolve_profile_path(path: Path) -> Path:
    """A run directory or a ``profile.json`` file → the ``profile.json`` path (or a clear error)."""
    if path.is_dir():
        candidate = path / "profile.json"
        if not candidate.exists():
            raise GpuoptError(
                f"{path}: no profile.json in this directory; is it a gpuopt run directory?"
            )
        return candidate
    if not path.exists():
        raise GpuoptError(f"{path}: no such file or directory")
    return path


def load_profile(path: Path) -> dict[str, Any]:
    """Read and check a profile document; every failure is a one-line :class:`GpuoptError`."""
    p = resolve_profile_path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise GpuoptError(f"{p}: cannot read: {exc.strerror or exc}") from None
    try:
        doc = loads(raw)
    except ValueError as exc:
        raise GpuoptError(f"{p}: not valid JSON ({exc}); the file may be truncated") from None
    check_schema_version(doc, str(p))
    problems = validate_profile(doc)
    if problems:
        raise GpuoptError(f"{p}: invalid profile: {problems[0]}")
    return doc  # type: ignore[no-any-return]
