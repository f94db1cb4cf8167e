"""Turn a :class:`TraceAnalysis` into a ``gpuopt.profile/1`` document (``gpuopt report TRACE``).

Contract keys a trace cannot give stay null/empty (Python and torch versions, CPU utilisation,
Python loops). What it can give goes into the contract keys (``gpu``, ``ranks``, ``steps``,
``breakdown``, ``transfers``, ``syncs``, ``dispatch``), everything richer into ``trace`` (plain
JSON) and, for people, into ``tables`` that every renderer shows.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from gpuopt.errors import GpuoptError
from gpuopt.schema import empty_profile, validate_profile
from gpuopt.trace import ranks as ranks_mod
from gpuopt.trace.analysis import RankAnalysis, TraceAnalysis, analyze_trace
from gpuopt.trace.array_stats import median, percentile
from gpuopt.trace.idle import idle_totals
from gpuopt.trace.idle_causes import CAUSES
from gpuopt.trace.kernels import top_kernels
from gpuopt.trace.prepare import COMMUNICATION
from gpuopt.trace.steps import CATEGORIES, contract_breakdown

HTA_NOTE = (
    "Definitions follow Holistic Trace Analysis 0.5 (docs/trace-metrics.md): the last profiler step "
    "is dropped when there are two or more; ns timestamps are rounded inward to whole µs."
)


def profile_from_traces(path: Path) -> dict[str, Any]:
    """A complete, valid profile document from a trace file or a folder of per-rank traces."""
    ta = analyze_trace(path)
    doc = build_profile(ta)
    problems = validate_profile(doc)
    if problems:  # a bug, not bad input: say so plainly rather than emit an invalid document
        raise GpuoptError(f"{path}: internal error building the report: {problems[0]}")
    return doc


def add_trace_to_profile(doc: dict[str, Any], path: Path) -> None:
    """For ``gpuopt profile`` on a GPU: add the profiler window's trace to a *run* document.

    Fills ``gpu`` (contract key), extends ``trace`` (keeping keys already there, e.g.
    ``profiler_window``), appends the trace ``tables`` and ``warnings``. Steps, breakdown,
    transfers and syncs stay the run's own (measured over all steps, not the window). Raises
    :class:`GpuoptError` on an unreadable trace; the caller decides whether that is a warning.
    """
    ta = analyze_trace(path)
    strag = ranks_mod.straggler([ra.view for ra in ta.ranks]) if len(ta.ranks) > 1 else None
    doc["gpu"] = [_gpu_entry(ra) for ra in ta.ranks if ra.has_gpu] or None
    trace = doc.get("trace") if isinstance(doc.get("trace"), dict) else {}
    assert isinstance(trace, dict)
    trace.update(_trace_details(ta, strag))
    doc["trace"] = trace
    doc["tables"] = list(doc.get("tables") or []) + _tables(ta, strag)
    doc["warnings"] = list(doc.get("warnings") or []) + _warnings(ta)


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), nd)


def _pct(x: float | None) -> float | None:
    return None if x is None else _r(100.0 * x, 2)


def build_profile(ta: TraceAnalysis) -> dict[str, Any]:
    first = ta.ranks[0]
    doc = empty_profile(script=ta.path, argv=[])
    doc["source"] = "trace"
    doc["environment"] = _environment(ta)
    doc["utilization"] = _utilization(ta)
    doc["steps"] = _steps(first)
    bd = contract_breakdown(first.step_overview)
    if bd is not None:
        doc["breakdown"] = {k: _r(v, 4) or 0.0 for k, v in bd.items()}
        total = sum(doc["breakdown"].values())
        if total > 0:  # rounding must not push the sum past the validator's tolerance
            doc["breakdown"]["other"] = round(max(0.0, doc["breakdown"]["other"] + 1.0 - total), 4)
    n_steps = max(len(first.view.steps), 1)
    doc["transfers"] = _transfers(first, n_steps)
    doc["syncs"] = _syncs(first, n_steps)
    doc["dispatch"] = _dispatch(first, n_steps)
    doc["gpu"] = [_gpu_entry(ra) for ra in ta.ranks if ra.has_gpu] or None
    strag = ranks_mod.straggler([ra.view for ra in ta.ranks]) if len(ta.ranks) > 1 else None
    doc["ranks"] = [_rank_entry(ra) for ra in ta.ranks] if len(ta.ranks) > 1 else None
    doc["trace"] = _trace_details(ta, strag)
    doc["tables"] = _tables(ta, strag)
    doc["warnings"] = list(ta.warnings) + _warnings(ta)
    from gpuopt.findings.engine import evaluate

    doc["findings"] = _dedupe(evaluate(doc))
    return doc


def _dedupe(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One finding per id: where a run-time rule and a trace rule both fire, keep the trace one."""
    by_id: dict[str, dict[str, Any]] = {}
    for f in findings:
        prev = by_id.get(f["id"])
        if prev is None or (f.get("source") == "trace" and prev.get("source") != "trace"):
            by_id[f["id"]] = f
    return [f for f in findings if by_id.get(f["id"]) is f]


def _environment(ta: TraceAnalysis) -> dict[str, Any]:
    gpus = []
    for ra in ta.ranks:
        if ra.device:
            gpus.append({"name": ra.device["name"], "memory_bytes": ra.device.get("memory_bytes")})
    any_gpu = any(ra.has_gpu for ra in ta.ranks)
    return {
        "python": None,
        "torch": None,
        "device": "cuda" if any_gpu else "cpu",
        "gpus": gpus,
        "cpu_count": None,
    }


def _utilization(ta: TraceAnalysis) -> dict[str, Any]:
    u = [
        ra.temporal.busy_us / ra.temporal.span_us
        for ra in ta.ranks
        if ra.temporal and ra.temporal.span_us > 0
    ]
    return {
        "gpu": {"mean": _r(100 * float(np.mean(u)), 2), "max": _r(100 * float(np.max(u)), 2)}
        if u
        else None,
        "cpu": {"mean": None, "max": None},
        "samples": 0,
        "timeline": None,
        "note": "GPU: from the trace, % of the span with at least one GPU event running (mean/max over ranks); CPU utilization is not in a trace",
    }


def _steps(ra: RankAnalysis) -> dict[str, Any]:
    rows = [r for r in ra.step_overview if r["step"] is not None]
    times = np.array([r["dur_us"] for r in rows]) / 1e6
    series = []
    t0 = rows[0]["start_us"] if rows else 0.0
    for r in rows:
        series.append(
            {
                "index": r["step"],
                "start_s": _r((r["start_us"] - t0) / 1e6, 6),
                "time_s": _r(r["dur_us"] / 1e6, 6),
                "data_wait_s": _r(r["dataloader_us"] / 1e6, 6),
                "h2d_s": _r(r["memcpy_us"] / 1e6, 6),
                "sync_s": _r(r["sync_us"] / 1e6, 6),
                "warmup": False,
            }
        )
    return {
        "count": len(rows),
        "measured": len(rows),
        "warmup": 0,
        "time_s": {
            "median": _r(median(times), 6) if times.size else None,
            "p10": _r(percentile(times, 10), 6) if times.size else None,
            "p90": _r(percentile(times, 90), 6) if times.size else None,
            "mean": _r(float(times.mean()), 6) if times.size else None,
        },
        "series": series,
    }


_DIRS = {"HtoD": "h2d", "DtoH": "d2h", "DtoD": "d2d"}


def _transfers(ra: RankAnalysis, n_steps: int) -> list[dict[str, Any]]:
    out = []
    for m in ra.transfers:
        d = _DIRS.get(m["direction"])
        if d is None:
            continue
        out.append(
            {
                "direction": d,
                "site": m["site"],
                "count_per_step": _r(m["count"] / n_steps, 3),
                "bytes_per_step": _r(m["bytes"] / n_steps, 1),
                "pinned": not m["pageable"],
                "non_blocking": not m["pageable"],
                "time_us_per_step": _r(m["time_us"] / n_steps, 3),
                "bandwidth_gbps": _r(m["bytes"] / (m["time_us"] * 1e3), 3)
                if m["time_us"] > 0 and m["bytes"] > 0
                else None,
            }
        )
    return out


def _sync_kind(call: dict[str, Any]) -> str:
    op = (call.get("outer_op") or call.get("op") or "").lower()
    for key, kind in (
        ("item", "item"),
        ("_local_scalar_dense", "item"),
        ("tolist", "tolist"),
        ("nonzero", "nonzero"),
        ("is_nonzero", "bool"),
    ):
        if key in op:
            return kind
    return "blocking_copy" if call["kind"] == "blocking_copy" else "synchronize"


def _syncs(ra: RankAnalysis, n_steps: int) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str | None, str, str | None], list[float]] = defaultdict(list)
    for c in ra.syncs:
        groups[(_sync_kind(c), c.get("site"), c["api"], c.get("outer_op"))].append(c["dur_us"])
    out = []
    for (kind, site, api, op), durs in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
        out.append(
            {
                "kind": kind,
                "site": site,
                "count_per_step": _r(len(durs) / n_steps, 3),
                "api": api,
                "op": op,
                "time_us_per_step": _r(sum(durs) / n_steps, 3),
            }
        )
    return out


def _dispatch(ra: RankAnalysis, n_steps: int) -> dict[str, Any]:
    v = ra.view
    ops = (
        (~v.on_stream)
        & v.ev.has_cat(("cpu_op", "Operator"))
        & v.ev.has_name(lambda n: n.startswith("aten::"))
    )
    n = int(ops.sum())
    return {
        "ops_per_step": _r(n / n_steps, 1) if n else None,
        "mean_op_us": _r(float(v.dur[ops].mean()), 3) if n else None,
    }


def _gpu_entry(ra: RankAnalysis) -> dict[str, Any]:
    t = ra.temporal.to_dict() if ra.temporal else {}
    it = idle_totals(ra.idle_streams)
    ls = ra.launch_summary
    return {
        "rank": ra.rank,
        "device": ra.device["name"] if ra.device else None,
        "utilization": _r(t.get("utilization"), 4),
        "idle_pct": _r(t.get("idle_pct"), 2),
        "compute_pct": _r(t.get("compute_pct"), 2),
        "non_compute_pct": _r(t.get("non_compute_pct"), 2),
        "idle_us": {k: _r(v, 1) for k, v in it.items()},
        "launch": {
            "count": ls["count"],
            "delay_median_us": _r(ls["launch_delay_us"]["median"], 2),
            "short_kernels": ls["short_kernels"],
        },
        "memcpy": {
            "count": int(sum(m["count"] for m in ra.memory)),
            "time_us": _r(sum(m["time_us"] for m in ra.memory), 1),
            "bytes": int(sum(m["bytes"] for m in ra.memory)),
        },
        "comm_overlap_pct": _pct(ra.comm_overlap),
    }


def _rank_entry(ra: RankAnalysis) -> dict[str, Any]:
    steps = [r for r in ra.step_overview if r["step"] is not None]
    n = max(len(steps), 1)
    v = ra.view
    m = v.on_stream & (v.ktype == COMMUNICATION)
    from gpuopt.trace import intervals as iv

    comm_us = iv.length(iv.merge(v.ts[m], v.end[m]))
    bd = contract_breakdown(ra.step_overview)
    return {
        "rank": ra.rank,
        "dir": ra.file,
        "steps": len(steps),
        "breakdown": {k: _r(x, 4) for k, x in bd.items()} if bd else None,
        "collective_s_per_step": _r(comm_us / n / 1e6, 6),
        "step_time_s_median": _r(median([r["dur_us"] for r in steps]) / 1e6, 6) if steps else None,
    }


def _trace_details(ta: TraceAnalysis, strag: dict[str, Any] | None) -> dict[str, Any]:
    ranks = []
    for ra in ta.ranks:
        ranks.append(
            {
                "rank": ra.rank,
                "file": ra.file,
                "events": ra.view.events_total,
                "events_analysed": len(ra.view.ev),
                "device": ra.device,
                "temporal": ra.temporal.to_dict() if ra.temporal else None,
                "streams": ra.streams,
                "idle_by_stream": ra.idle_streams,
                "idle_totals_us": idle_totals(ra.idle_streams),
                "idle_causes": ra.idle_causes,
                "kernel_types_us": ra.kernel_types,
                "top_kernels": top_kernels(ra.kernels, 10),
                "launch": ra.launch_summary,
                "memory": ra.memory,
                "transfers": ra.transfers,
                "memcpy_by_name": ra.memcpy_by_name,
                "sync_calls": {
                    "count": len(ra.syncs),
                    "time_us": float(sum(c["dur_us"] for c in ra.syncs)),
                },
                "comm_overlap_pct": _pct(ra.comm_overlap),
                "steps": ra.step_overview,
                "profiler_steps": [s.number for s in ra.view.steps],
                "dropped_last_step": ra.view.dropped_last_step.number
                if ra.view.dropped_last_step
                else None,
            }
        )
    return {
        "path": ta.path,
        "load_s": round(ta.load_s, 4),
        "analyze_s": round(ta.analyze_s, 4),
        "filtered_last_step": ta.filtered_last_step,
        "note": HTA_NOTE,
        "ranks": ranks,
        "straggler": strag,
    }


def _tables(ta: TraceAnalysis, strag: dict[str, Any] | None) -> list[dict[str, Any]]:
    T: list[dict[str, Any]] = []

    def table(
        id_: str, title: str, columns: list[str], rows: list[list[Any]], note: str = ""
    ) -> None:
        if rows:
            T.append({"id": id_, "title": title, "columns": columns, "rows": rows, "note": note})

    ms = lambda us: _r(us / 1e3, 3)  # noqa: E731
    table(
        "trace-gpu-time",
        "GPU time per rank (HTA temporal breakdown)",
        [
            "rank",
            "device",
            "span ms",
            "busy %",
            "idle %",
            "compute %",
            "non-compute %",
            "comm/compute overlap %",
        ],
        [
            [
                ra.rank,
                ra.device["name"] if ra.device else None,
                ms(ra.temporal.span_us),
                _pct(ra.temporal.busy_us / ra.temporal.span_us),
                _r(ra.temporal.to_dict()["idle_pct"], 2),
                _r(ra.temporal.to_dict()["compute_pct"], 2),
                _r(ra.temporal.to_dict()["non_compute_pct"], 2),
                _pct(ra.comm_overlap),
            ]
            for ra in ta.ranks
            if ra.temporal and ra.temporal.span_us > 0
        ],
        "span = first GPU event start to last GPU event end; busy = time with at least one GPU event running.",
    )
    table(
        "trace-streams",
        "Per-stream utilization",
        ["rank", "stream", "events", "busy ms", "stream span ms", "utilization %"],
        [
            [
                ra.rank,
                s["stream"],
                s["events"],
                ms(s["busy_us"]),
                ms(s["span_us"]),
                _pct(s["utilization"]),
            ]
            for ra in ta.ranks
            for s in ra.streams
        ],
    )
    table(
        "trace-idle-streams",
        "Idle time per stream (HTA categories)",
        ["rank", "stream", "host wait ms", "kernel wait ms", "other ms"],
        [
            [ra.rank, r["stream"], ms(r["host_wait"]), ms(r["kernel_wait"]), ms(r["other"])]
            for ra in ta.ranks
            for r in ra.idle_streams
        ],
        "host wait: the launch came after the previous GPU work ended; kernel wait: gap < 30 µs.",
    )
    rows = []
    for ra in ta.ranks:
        ic = ra.idle_causes
        total = ic.get("idle_us", 0.0)
        for c in CAUSES:
            us = ic["by_cause"].get(c, 0.0)
            if us > 0:
                rows.append([ra.rank, c, ms(us), _r(100 * us / total, 1) if total else None])
    table(
        "trace-idle-causes",
        "What the host was doing while the GPU was idle",
        ["rank", "cause", "idle ms", "% of idle"],
        rows,
        "Each idle µs is credited to the launching thread's activity, first match of: dataloader, sync, optimizer, launch, cpu_op, python, untraced.",
    )
    table(
        "trace-idle-causes-by-step",
        "GPU idle causes per step (ms)",
        ["rank", "step", "idle ms", *CAUSES],
        [
            [ra.rank, r["step"], ms(r["idle_us"]), *[ms(r[c]) for c in CAUSES]]
            for ra in ta.ranks
            for r in ra.idle_causes.get("by_step", [])
        ],
    )
    table(
        "trace-idle-sites",
        "Top call sites behind GPU idle time",
        ["rank", "cause", "op", "site", "idle ms"],
        [
            [ra.rank, s["cause"], s["op"], s["site"], ms(s["idle_us"])]
            for ra in ta.ranks
            for s in ra.idle_causes.get("sites", [])[:10]
        ],
        "site: the user's Python frame, where the trace has stacks (with_stack=True).",
    )
    table(
        "trace-step-breakdown",
        "Step time breakdown (PyTorch profiler overview: each category only counts time not covered by the ones before it)",
        ["rank", "step", "step ms", *[f"{c} ms" for c in CATEGORIES]],
        [
            [ra.rank, r["step"], ms(r["dur_us"]), *[ms(r[f"{c}_us"]) for c in CATEGORIES]]
            for ra in ta.ranks
            for r in ra.step_overview
        ],
        "Without ProfilerStep annotations the whole trace is one row (step empty).",
    )
    kt: dict[str, float] = defaultdict(float)
    for ra in ta.ranks:
        for k, us in ra.kernel_types.items():
            kt[k] += us
    total_kt = sum(kt.values())
    table(
        "trace-kernel-types",
        "GPU time by kernel type (all ranks), overlaps separate",
        ["type", "ms", "%"],
        [
            [k, ms(us), _r(100 * us / total_kt, 1)]
            for k, us in sorted(kt.items(), key=lambda kv: -kv[1])
        ]
        if total_kt
        else [],
    )
    table(
        "trace-top-kernels",
        "Top GPU kernels by total time",
        ["rank", "type", "name", "count", "total ms", "mean µs", "max µs"],
        [
            [
                ra.rank,
                k["type"],
                k["name"],
                k["count"],
                ms(k["total_us"]),
                _r(k["mean_us"], 2),
                _r(k["max_us"], 2),
            ]
            for ra in ta.ranks
            for k in top_kernels(ra.kernels, 5)
        ],
    )
    table(
        "trace-launch",
        "Kernel launches",
        [
            "rank",
            "launches",
            "CPU launch median µs",
            "launch delay median µs",
            "launch delay p95 µs",
            "short kernels",
            "runtime outliers (>50 µs)",
            "delay outliers (>100 µs)",
        ],
        [
            [
                ra.rank,
                ls["count"],
                _r(ls["cpu_duration_us"]["median"], 2),
                _r(ls["launch_delay_us"]["median"], 2),
                _r(ls["launch_delay_us"]["p95"], 2),
                ls["short_kernels"],
                ls["runtime_outliers"],
                ls["launch_delay_outliers"],
            ]
            for ra in ta.ranks
            for ls in [ra.launch_summary]
            if ls["count"]
        ],
        "short kernel: GPU time shorter than the CPU time its launch took.",
    )
    table(
        "trace-memory",
        "Memory copies and sets",
        ["rank", "direction", "pageable", "count", "GPU ms", "MB", "GB/s"],
        [
            [
                ra.rank,
                m["direction"],
                m["pageable"],
                m["count"],
                ms(m["time_us"]),
                _r(m["bytes"] / 1e6, 3),
                _r(m["bandwidth_gbps"], 2),
            ]
            for ra in ta.ranks
            for m in ra.memory
        ],
    )
    srows = []
    for ra in ta.ranks:
        by_api: dict[tuple[str, str | None], list[float]] = defaultdict(list)
        for call in ra.syncs:
            by_api[(call["api"], call.get("outer_op"))].append(call["dur_us"])
        for (api, op), d in sorted(by_api.items(), key=lambda kv: -sum(kv[1]))[:10]:
            srows.append([ra.rank, api, op, len(d), ms(sum(d))])
    table(
        "trace-syncs",
        "Host-blocking sync calls",
        ["rank", "API", "issued by op", "count", "CPU ms"],
        srows,
    )
    if len(ta.ranks) > 1:
        rows = []
        for ra in ta.ranks:
            e = _rank_entry(ra)
            late = strag["mean_lateness_us"].get(ra.rank) if strag else None
            rows.append(
                [
                    ra.rank,
                    e["steps"],
                    _r((e["step_time_s_median"] or 0) * 1e3, 3),
                    _r(ra.temporal.to_dict()["idle_pct"], 2) if ra.temporal else None,
                    _r((e["collective_s_per_step"] or 0) * 1e3, 3),
                    _pct(ra.comm_overlap),
                    _r(late, 1),
                    bool(strag and strag["rank"] == ra.rank),
                ]
            )
        table(
            "trace-ranks",
            "Ranks",
            [
                "rank",
                "steps",
                "step median ms",
                "idle %",
                "collectives ms/step",
                "comm overlap %",
                "mean lateness at collectives µs",
                "straggler",
            ],
            rows,
            "lateness: how much later than the earliest rank this rank starts each collective.",
        )
    return T


def _warnings(ta: TraceAnalysis) -> list[str]:
    out = []
    for ra in ta.ranks:
        if not ra.has_gpu:
            out.append(
                f"rank {ra.rank}: no GPU events in the trace (CPU-only profile): GPU metrics are empty"
            )
        elif not ra.view.steps:
            out.append(
                f"rank {ra.rank}: no ProfilerStep annotations: the breakdown covers the whole trace as one window"
            )
    return out
