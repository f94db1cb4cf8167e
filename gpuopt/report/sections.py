"""The detail tables every report format shows: transfers, syncs, loops, dispatch, ragged batches,
per-rank GPU time, ranks, the generic ``tables`` analyses add, and trace facts.

Built once here as plain :class:`Section` objects (display text, a sort key, whether a cell is a
site or a number) so the terminal, Markdown and HTML reports show the same rows in the same order
with the same numbers; each renderer only decides how to lay a section out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gpuopt.report.common import (
    MISSING,
    WOULD_BLOCK_LABEL,
    as_dict,
    as_list,
    fmt_bytes,
    fmt_count,
    fmt_duration,
    fmt_evidence_value,
    fmt_frac,
    fmt_pct,
    fmt_scalar,
    fmt_us,
    get,
    num,
    one_line,
    rank_key,
    sort_key,
    text,
)

# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One table cell: the display text (plain, unescaped), a sort key, and whether it is a site
    (a link in HTML) or a number (right-aligned)."""

    text: str
    sort: float | str | None = None
    site: str | None = None
    numeric: bool = False


@dataclass
class Section:
    """A table every format shows: ``id`` is stable (HTML anchors, tests)."""

    id: str
    title: str
    columns: list[str]
    rows: list[list[Cell]]
    note: str = ""
    numeric_columns: set[int] = field(default_factory=set)
    per_rank: bool = False  # rows are ranks: a narrow terminal may show them as columns instead
    compact_rows: int | None = None  # the terminal shows only this many rows (the headline ones)


def _ncell(value: Any, formatter: Any = fmt_count) -> Cell:
    return Cell(formatter(value), sort=num(value), numeric=True)


def _scell(value: Any) -> Cell:
    t = one_line(value)
    return Cell(t or MISSING, sort=t)


def _site(value: Any) -> Cell:
    t = one_line(value)
    return Cell(t or MISSING, sort=t, site=t or None)


def _yesno(value: Any) -> Cell:
    if value is None:
        return Cell(MISSING, sort="")
    return Cell("yes" if value else "no", sort="yes" if value else "no")


def _desc(key: str) -> Any:
    return lambda e: (-(num(e.get(key)) or 0.0), text(e.get("site")))


def _has(items: list[dict[str, Any]], key: str) -> bool:
    return any(
        num(e.get(key)) is not None or (isinstance(e.get(key), str) and e.get(key)) for e in items
    )


def transfers_section(doc: dict[str, Any]) -> Section | None:
    items = sorted(
        (e for e in as_list(doc.get("transfers")) if isinstance(e, dict)),
        key=_desc("bytes_per_step"),
    )
    if not items:
        return None
    timed, bw = _has(items, "time_us_per_step"), _has(items, "bandwidth_gbps")
    columns = (
        ["dir", "site", "count", "bytes"]
        + (["time"] if timed else [])
        + (["GB/s"] if bw else [])
        + ["pinned", "non_blocking"]
    )
    rows = []
    for e in items:
        row = [
            _scell(e.get("direction")),
            _site(e.get("site")),
            _ncell(e.get("count_per_step")),
            _ncell(e.get("bytes_per_step"), fmt_bytes),
        ]
        if timed:
            row.append(_ncell(e.get("time_us_per_step"), fmt_us))
        if bw:
            row.append(_ncell(e.get("bandwidth_gbps"), lambda v: fmt_scalar(num(v))))
        row += [_yesno(e.get("pinned")), _yesno(e.get("non_blocking"))]
        rows.append(row)
    return Section("transfers", "Host↔device copies (per step)", columns, rows)


def syncs_section(doc: dict[str, Any]) -> Section | None:
    items = sorted(
        (e for e in as_list(doc.get("syncs")) if isinstance(e, dict)), key=_desc("count_per_step")
    )
    if not items:
        return None
    would_block = any(e.get("would_block_on_gpu") for e in items)
    has_op, timed = _has(items, "op"), _has(items, "time_us_per_step")
    columns = (
        ["kind", "site"]
        + (["op"] if has_op else [])
        + ["count"]
        + (["time"] if timed else [])
        + (["note"] if would_block else [])
    )
    rows = []
    for e in items:
        row = [_scell(e.get("kind")), _site(e.get("site"))]
        if has_op:
            row.append(_scell(e.get("op")))
        row.append(_ncell(e.get("count_per_step")))
        if timed:
            row.append(_ncell(e.get("time_us_per_step"), fmt_us))
        if would_block:
            note = WOULD_BLOCK_LABEL if e.get("would_block_on_gpu") else ""
            row.append(Cell(note, sort=note))
        rows.append(row)
    note = (
        "CPU-only run: these calls cost little here, but each one would block on a GPU "
        "(the CPU waits for all queued GPU work)."
        if would_block
        else ""
    )
    return Section("syncs", "Host-device syncs (per step)", columns, rows, note=note)


def dataloaders_section(doc: dict[str, Any]) -> Section | None:
    items = sorted(
        (e for e in as_list(doc.get("dataloaders")) if isinstance(e, dict)),
        key=_desc("wait_s_per_step"),
    )
    if not items:
        return None
    rows = [
        [
            _site(e.get("site")),
            _scell(e.get("dataset")),
            _ncell(e.get("batch_size")),
            _ncell(e.get("num_workers")),
            _yesno(e.get("pin_memory")),
            _yesno(e.get("persistent_workers")),
            _ncell(e.get("prefetch_factor")),
            _ncell(e.get("wait_s_per_step"), fmt_duration),
        ]
        for e in items
    ]
    return Section(
        "dataloaders",
        "DataLoaders",
        ["site", "dataset", "batch", "workers", "pinned", "persistent", "prefetch", "wait/step"],
        rows,
        note="wait/step: time the training loop spent in next() on this loader, per measured step.",
    )


def loops_section(doc: dict[str, Any]) -> Section | None:
    items = sorted(
        (e for e in as_list(doc.get("loops")) if isinstance(e, dict)), key=_desc("ops_per_step")
    )
    if not items:
        return None
    rows = [
        [_site(e.get("site")), _ncell(e.get("ops_per_step")), _ncell(e.get("iterations_per_step"))]
        for e in items
    ]
    headers = ["site", "ops", "iterations"]
    if any(as_list(e.get("through")) for e in items):
        # The loop calls a user helper that issues the ops: name it (the first; all are in JSON).
        headers.append("ops issued in")
        for row, e in zip(rows, items, strict=True):
            through = as_list(e.get("through"))
            row.append(_site(through[0]) if through else Cell("loop body", sort=""))
    return Section("loops", "Python loops issuing small tensor ops (per step)", headers, rows)


_DISPATCH_FIELDS: tuple[tuple[str, str, Any], ...] = (
    ("ops_per_step", "ops per step", fmt_count),
    ("mean_op_us", "mean time per op (host)", fmt_us),
    ("between_ops_share", "share of step between ops", fmt_frac),
    ("recorder_overhead_us_per_op", "recorder overhead per op", fmt_us),
    ("window_steps", "steps recorded", fmt_count),
)


def dispatch_section(doc: dict[str, Any]) -> Section | None:
    d = as_dict(doc.get("dispatch"))
    rows = []
    for key, label, f in _DISPATCH_FIELDS:
        if num(d.get(key)) is not None:
            rows.append(
                [Cell(label, sort=label), Cell(f(d.get(key)), sort=num(d.get(key)), numeric=True)]
            )
    headline = len(rows)
    known = {k for k, _, _ in _DISPATCH_FIELDS} | {"note"}
    extra = _key_value_rows({k: v for k, v in d.items() if k not in known})
    if not rows and not extra:
        return None
    return Section(
        "dispatch",
        "Op dispatch (host side)",
        ["measure", "value"],
        rows + extra,
        note=one_line(d.get("note")),
        compact_rows=headline if extra and headline else None,
    )


def _list_text(value: list[Any]) -> str:
    """A list in one cell: scalars joined (up to 8), otherwise its length."""
    if all(not isinstance(v, (dict, list)) for v in value):
        shown = ", ".join(fmt_scalar(v) for v in value[:8])
        return shown + (f", … ({len(value)} in all)" if len(value) > 8 else "") if value else "none"
    return f"{len(value)} entries"


def _key_value_rows(d: dict[str, Any]) -> list[list[Cell]]:
    rows: list[list[Cell]] = []
    for key, value in d.items():
        name = one_line(key)
        if isinstance(value, dict):
            for k2, v2 in value.items():
                sub = f"{name}.{one_line(k2)}"
                if isinstance(v2, list):
                    rows.append([Cell(sub, sort=sub), Cell(_list_text(v2), sort=len(v2))])
                elif not isinstance(v2, dict):
                    rows.append(
                        [
                            Cell(sub, sort=sub),
                            Cell(
                                fmt_evidence_value(str(k2), v2),
                                sort=sort_key(v2),
                                numeric=num(v2) is not None,
                            ),
                        ]
                    )
        elif isinstance(value, list):
            rows.append([Cell(name, sort=name), Cell(_list_text(value), sort=len(value))])
        else:
            rows.append(
                [
                    Cell(name, sort=name),
                    Cell(
                        fmt_evidence_value(str(key), value),
                        sort=sort_key(value),
                        numeric=num(value) is not None,
                    ),
                ]
            )
    return rows


def _key_value_section(
    sec_id: str, title: str, obj: Any, compact: int | None = 8
) -> Section | None:
    """A flat view of an object whose keys gpuopt may extend: scalars shown with unit-aware
    formatting, nested objects one level deep as ``a.b``, lists as their values or length;
    a ``note`` key becomes the section's note."""
    d = as_dict(obj)
    rows = _key_value_rows({k: v for k, v in d.items() if k != "note"})
    if not rows:
        return None
    return Section(
        sec_id,
        title,
        ["measure", "value"],
        rows[:60],
        note=one_line(d.get("note")),
        compact_rows=compact if compact and len(rows) > compact else None,
    )


def ragged_section(doc: dict[str, Any]) -> Section | None:
    """Shown when the batches vary at all (shapes, sizes, per-sample lists, padding); a run whose
    batches all have one shape has nothing to say here (the JSON keeps the counts)."""
    d = as_dict(doc.get("ragged"))
    varies = (
        (num(d.get("distinct_shapes")) or 0) > 1
        or (num(d.get("step_signatures_distinct")) or 0) > 1
        or bool(d.get("variable_batch_size"))
        or bool(d.get("batch_size_1_variable"))
        or (num(d.get("list_batches")) or 0) > 0
        or (num(d.get("pad_fraction")) or 0) > 0
    )
    if d and not varies:
        return None
    return _key_value_section("ragged", "Ragged batches", doc.get("ragged"))


def trace_section(doc: dict[str, Any]) -> Section | None:
    return _key_value_section("trace", "Trace", doc.get("trace"))


def _gpu_util(value: Any) -> Cell:
    """``gpu[].utilization``: a fraction, or ``{mean, max}`` of fractions (the contract does not
    fix which, so both are read)."""
    v = num(value["mean"]) if isinstance(value, dict) and "mean" in value else num(value)
    return Cell(fmt_frac(v), sort=v, numeric=True)


def gpu_sections(doc: dict[str, Any]) -> list[Section]:
    entries = sorted(
        (e for e in as_list(doc.get("gpu")) if isinstance(e, dict)),
        key=lambda e: (rank_key(e), text(e.get("device"))),
    )
    if not entries:
        return []
    time_rows = [
        [
            _ncell(e.get("rank")),
            _scell(e.get("device")),
            _gpu_util(e.get("utilization")),
            _ncell(e.get("idle_pct"), fmt_pct),
            _ncell(e.get("compute_pct"), fmt_pct),
            _ncell(e.get("non_compute_pct"), fmt_pct),
            _ncell(e.get("comm_overlap_pct"), fmt_pct),
        ]
        for e in entries
    ]
    idle_rows = [
        [
            _ncell(e.get("rank")),
            _ncell(get(e, "idle_us", "host_wait"), fmt_us),
            _ncell(get(e, "idle_us", "kernel_wait"), fmt_us),
            _ncell(get(e, "idle_us", "other"), fmt_us),
            _ncell(get(e, "launch", "count")),
            _ncell(get(e, "launch", "delay_median_us"), fmt_us),
            _ncell(get(e, "launch", "short_kernels")),
            _ncell(get(e, "memcpy", "count")),
            _ncell(get(e, "memcpy", "time_us"), fmt_us),
            _ncell(get(e, "memcpy", "bytes"), fmt_bytes),
        ]
        for e in entries
    ]
    return [
        Section(
            "gpu",
            "GPU time per rank",
            ["rank", "device", "util", "idle", "compute", "non-compute", "comm overlap"],
            time_rows,
            per_rank=True,
        ),
        Section(
            "gpu-idle",
            "GPU idle time, launches and copies per rank",
            [
                "rank",
                "idle: host wait",
                "kernel wait",
                "other",
                "launches",
                "launch delay p50",
                "short kernels",
                "memcpy",
                "memcpy time",
                "memcpy bytes",
            ],
            idle_rows,
            per_rank=True,
        ),
    ]


def rank_steps(e: dict[str, Any]) -> tuple[Any, Any]:
    """``(steps, median step time)`` of a ``ranks`` entry: the runner writes ``steps`` (count)
    and ``step_time_median_s``, the trace reader ``step_time_s_median``; a nested ``steps``
    object (``{measured, time_s: {median}}``) is read too."""
    steps = e.get("steps")
    if isinstance(steps, dict):
        return steps.get("measured", steps.get("count")), get(steps, "time_s", "median")
    median = e.get("step_time_median_s")
    if num(median) is None:
        median = e.get("step_time_s_median")
    return steps, median


def ranks_section(doc: dict[str, Any]) -> Section | None:
    entries = sorted((e for e in as_list(doc.get("ranks")) if isinstance(e, dict)), key=rank_key)
    if not entries:
        return None
    with_status = any(e.get("status") for e in entries)
    rows = []
    for e in entries:
        steps, median = rank_steps(e)
        bd = as_dict(e.get("breakdown"))
        row = [_ncell(e.get("rank"))] + ([_scell(e.get("status"))] if with_status else [])
        row += [
            _ncell(steps),
            _ncell(median, fmt_duration),
            _ncell(bd.get("data_wait"), fmt_frac),
            _ncell(bd.get("sync"), fmt_frac),
            _ncell(bd.get("compute"), fmt_frac),
            _ncell(e.get("collective_s_per_step"), fmt_duration),
            _scell(e.get("dir")),
        ]
        rows.append(row)
    columns = (
        ["rank"]
        + (["status"] if with_status else [])
        + ["steps", "step median", "data wait", "sync", "compute", "collectives/step", "dir"]
    )
    spread = as_dict(doc.get("rank_spread"))
    note = ""
    if num(spread.get("ratio")) is not None:
        note = (
            f"slowest rank {text(spread.get('slowest_rank'))} has a median step "
            f"{num(spread.get('ratio')):.2f}× that of the fastest, rank {text(spread.get('fastest_rank'))}."
        )
    return Section("ranks", "Ranks", columns, rows, note=note, per_rank=True)


def gpu_samples_section(doc: dict[str, Any]) -> Section | None:
    """``utilization.gpus``: NVML samples per GPU (utilization in percent)."""
    items = [e for e in as_list(get(doc, "utilization", "gpus")) if isinstance(e, dict)]
    if not items:
        return None
    rows = [
        [
            _ncell(e.get("index")),
            _ncell(e.get("util_mean"), fmt_pct),
            _ncell(e.get("process_util_mean"), fmt_pct),
            _ncell(e.get("memory_used_max_bytes"), fmt_bytes),
            _ncell(
                e.get("power_w_mean"), lambda v: MISSING if num(v) is None else f"{num(v):.0f} W"
            ),
            _ncell(
                e.get("sm_clock_mhz_mean"),
                lambda v: MISSING if num(v) is None else f"{num(v):.0f} MHz",
            ),
        ]
        for e in sorted(items, key=lambda e: num(e.get("index")) or 0.0)
    ]
    return Section(
        "gpu-samples",
        "GPUs sampled (NVML)",
        ["gpu", "util mean", "this process", "memory peak", "power mean", "SM clock mean"],
        rows,
    )


def generic_sections(doc: dict[str, Any]) -> list[Section]:
    """``tables`` as analyses wrote them: rows padded or cut to the column count."""
    out = []
    for i, t in enumerate(as_list(doc.get("tables"))):
        if not isinstance(t, dict):
            continue
        columns = [one_line(c) for c in as_list(t.get("columns"))]
        raw_rows = [r for r in as_list(t.get("rows")) if isinstance(r, list)]
        if not columns and raw_rows:
            columns = [f"col{j + 1}" for j in range(max(len(r) for r in raw_rows))]
        if not columns:
            continue
        rows = []
        for r in raw_rows:
            cells = []
            for j in range(len(columns)):
                v = r[j] if j < len(r) else None
                n = num(v)
                cells.append(
                    Cell(fmt_scalar(v), sort=n if n is not None else text(v), numeric=n is not None)
                )
            rows.append(cells)
        sec_id = "table-" + (
            re.sub(r"[^A-Za-z0-9_-]+", "-", text(t.get("id"))).strip("-") or str(i + 1)
        )
        out.append(
            Section(
                sec_id,
                one_line(t.get("title")) or one_line(t.get("id")) or f"Table {i + 1}",
                columns,
                rows,
                note=one_line(t.get("note")),
            )
        )
    return out


def detail_sections(doc: dict[str, Any]) -> list[Section]:
    """Every detail table of the document, in report order; absent or empty ones left out."""
    sections: list[Section | None] = [
        dataloaders_section(doc),
        transfers_section(doc),
        syncs_section(doc),
        loops_section(doc),
        dispatch_section(doc),
        ragged_section(doc),
        gpu_samples_section(doc),
        *gpu_sections(doc),
        ranks_section(doc),
        *generic_sections(doc),
        trace_section(doc),
    ]
    result = []
    for s in sections:
        if s is None:
            continue
        s.numeric_columns = {
            j
            for j in range(len(s.columns))
            if any(j < len(r) and r[j].numeric for r in s.rows)
            and all(r[j].numeric or r[j].text == MISSING for r in s.rows if j < len(r))
        }
        result.append(s)
    return result
