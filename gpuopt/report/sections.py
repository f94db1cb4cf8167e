"""The detail tables every report format shows: transfers, syncs, loops, dispatch, ragged batches,
per-rank GPU time, ranks, the generic ``tables`` analyses add, and trace facts.

Built once here as plain :class:`Section` objects (display text, a sort key, whether a cell is a
site or a number) so the terminal, Markdown and HTML reports show the same rows in the same order
with the same numbers; each renderer only decides how to lay a section out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from msgspec import Struct

from gpuopt.model.records import given, set_fields
from gpuopt.report.compile_sections import compile_sections
from gpuopt.report.findings import fmt_evidence_value
from gpuopt.report.section_types import Cell as Cell  # re-exported: the renderers import both
from gpuopt.report.section_types import Section as Section
from gpuopt.units import (
    MISSING,
    fmt_bytes,
    fmt_count,
    fmt_duration,
    fmt_frac,
    fmt_pct,
    fmt_scalar,
    fmt_us,
    num,
    one_line,
    text,
)

if TYPE_CHECKING:
    from gpuopt.model.profile import (
        GpuRank,
        MemoryHolder,
        MemoryReport,
        Profile,
        RankEntry,
        RankSpread,
        Table,
    )

WOULD_BLOCK_LABEL = "would block on a GPU"

# ---------------------------------------------------------------------------------------------


Formatter = Callable[[Any], str]


def _ncell(value: Any, formatter: Formatter = fmt_count) -> Cell:
    return Cell(formatter(value), sort=num(value), numeric=True)


def _scell(value: str | None) -> Cell:
    t = one_line(value)
    return Cell(t or MISSING, sort=t)


def _site(value: str | None) -> Cell:
    t = one_line(value)
    return Cell(t or MISSING, sort=t, site=t or None)


def _yesno(value: bool | None) -> Cell:
    if value is None:
        return Cell(MISSING, sort="")
    return Cell("yes" if value else "no", sort="yes" if value else "no")


def sort_key(value: Any) -> float | str:
    """A key for sorting table columns: the number itself where there is one, else the text."""
    v = num(value)
    return v if v is not None else text(value)


def _largest_first(value: Callable[[Any], Any]) -> Callable[[Any], tuple[float, str]]:
    """Sort key: ``value(entry)`` descending (missing as 0), then the site."""
    return lambda e: (-(num(value(e)) or 0.0), text(e.site))


def _has(values: Iterable[Any]) -> bool:
    """Does any entry have a value here (a number or a non-empty string)?"""
    return any(num(v) is not None or (isinstance(v, str) and v) for v in values)


def _gbps(value: Any) -> str:
    return fmt_scalar(num(value))


def transfers_section(profile: Profile) -> Section | None:
    items = sorted(profile.transfers, key=_largest_first(lambda e: e.bytes_per_step))
    if not items:
        return None
    timed = _has(given(e.time_us_per_step) for e in items)
    bw = _has(given(e.bandwidth_gbps) for e in items)
    columns = (
        ["dir", "site", "count", "bytes"]
        + (["time"] if timed else [])
        + (["GB/s"] if bw else [])
        + ["pinned", "non_blocking"]
    )
    rows = []
    for e in items:
        row = [
            _scell(e.direction),
            _site(e.site),
            _ncell(e.count_per_step),
            _ncell(e.bytes_per_step, fmt_bytes),
        ]
        if timed:
            row.append(_ncell(given(e.time_us_per_step), fmt_us))
        if bw:
            row.append(_ncell(given(e.bandwidth_gbps), _gbps))
        row += [_yesno(e.pinned), _yesno(e.non_blocking)]
        rows.append(row)
    return Section("transfers", "Host↔device copies (per step)", columns, rows)


def syncs_section(profile: Profile) -> Section | None:
    items = sorted(profile.syncs, key=_largest_first(lambda e: e.count_per_step))
    if not items:
        return None
    would_block = any(e.would_block_on_gpu for e in items)
    has_op = _has(given(e.op) for e in items)
    timed = _has(given(e.time_us_per_step) for e in items)
    columns = (
        ["kind", "site"]
        + (["op"] if has_op else [])
        + ["count"]
        + (["time"] if timed else [])
        + (["note"] if would_block else [])
    )
    rows = []
    for e in items:
        row = [_scell(e.kind), _site(e.site)]
        lib = given(e.library_site)
        if lib:  # a framework's read: the user's line, then the framework's
            row[1] = Cell(f"{row[1].text} → {lib}", sort=row[1].sort, site=row[1].site)
        if has_op:
            row.append(_scell(given(e.op)))
        row.append(_ncell(e.count_per_step))
        if timed:
            row.append(_ncell(given(e.time_us_per_step), fmt_us))
        if would_block:
            note = WOULD_BLOCK_LABEL if e.would_block_on_gpu else ""
            row.append(Cell(note, sort=note))
        rows.append(row)
    note = (
        "CPU-only run: these calls cost little here, but each one would block on a GPU "
        "(the CPU waits for all queued GPU work)."
        if would_block
        else ""
    )
    return Section("syncs", "Host-device syncs (per step)", columns, rows, note=note)


def dataloaders_section(profile: Profile) -> Section | None:
    items = sorted(
        given(profile.dataloaders) or [], key=_largest_first(lambda e: e.wait_s_per_step)
    )
    if not items:
        return None
    built = any(given(e.built_at) for e in items)
    cpu_run = profile.environment.device != "cuda" and not profile.environment.gpus
    rows = []
    for e in items:
        row = [_site(e.site)]
        if built:
            at = given(e.built_at)
            row.append(_site(at) if at else Cell(MISSING, sort=""))
        pinned = (
            Cell("ignored", sort="ignored") if cpu_run and e.pin_memory else _yesno(e.pin_memory)
        )
        row += [
            _scell(e.dataset),
            _ncell(e.batch_size),
            _ncell(e.num_workers),
            pinned,
            _yesno(e.persistent_workers),
            _ncell(e.prefetch_factor),
            _ncell(e.wait_s_per_step, fmt_duration),
        ]
        rows.append(row)
    headers = ["loop", *(["built at"] if built else []), "dataset", "batch", "workers"]
    headers += ["pinned", "persistent", "prefetch", "wait/step"]
    note = "wait/step: time the training loop spent in next() on this loader, per measured step."
    if built:
        note += " built at: the DataLoader(...) call, where its settings go."
        calls = sorted({c for e in items if (c := given(e.settings_call))})
        if calls:
            note += (
                f" A loader the framework builds: its settings go in the {', '.join(calls)}(...) "
                "call (dataloader_num_workers, dataloader_pin_memory, "
                "dataloader_persistent_workers, dataloader_prefetch_factor)."
            )
    if any(r[len(headers) - 5].text == "ignored" for r in rows):
        note += " pinned ignored: pin_memory has no effect without an accelerator."
    return Section("dataloaders", "DataLoaders", headers, rows, note=note)


def loops_section(profile: Profile) -> Section | None:
    items = sorted(profile.loops, key=_largest_first(lambda e: e.ops_per_step))
    if not items:
        return None
    rows = [[_site(e.site), _ncell(e.ops_per_step), _ncell(e.iterations_per_step)] for e in items]
    headers = ["site", "ops", "iterations"]
    if any(given(e.through) for e in items):
        # The loop calls a user helper that issues the ops: name it (the first; all are in JSON).
        headers.append("ops issued in")
        for row, e in zip(rows, items, strict=True):
            through = given(e.through)
            row.append(_site(through[0]) if through else Cell("loop body", sort=""))
    return Section("loops", "Python loops issuing small tensor ops (per step)", headers, rows)


def outside_ops_section(profile: Profile) -> Section | None:
    """The lines the recorded steps spent time at without issuing a tensor op (a sleep, a
    blocking read, Python work), as the gap sampler saw them: "other", not dispatch."""
    d = profile.dispatch
    items = given(d.outside_ops_sites) or []
    if not items:
        return None
    rows = [
        [
            _site(e.site),
            _scell(e.frame if e.frame != e.site else "the line itself"),
            Cell(fmt_us(e.time_us_per_step), sort=e.time_us_per_step, numeric=True),
            Cell(fmt_frac(e.time_share), sort=e.time_share, numeric=True),
        ]
        for e in items
    ]
    total = num(d.outside_ops_us_per_step)
    seen = sum(e.time_us_per_step for e in items)
    note = (
        f"stretches of more than {fmt_us(num(d.outside_ops_min_us) or 100)} without a tensor op, "
        "data, sync and collective waits left out: part of 'other', never dispatch"
    )
    if total and seen < 0.9 * total:
        note += (
            f"; {fmt_us(total - seen)} of the {fmt_us(total)} per step was not seen by the sampler "
            "(the process was not running: a busy machine)"
        )
    headers = ["site", "running", "time", "share"]
    return Section("outside_ops", "Time outside tensor ops (per step)", headers, rows, note=note)


# (label, per-step value field, its formatter, share-of-step field): the rows a reader needs.
# The recorder's calibration internals (raw times, entry costs) stay in the JSON.
_DISPATCH_ROWS: tuple[tuple[str, str | None, Formatter, str | None], ...] = (
    ("steps recorded", "window_steps", fmt_count, None),
    ("step time", "step_time_us", fmt_us, None),
    ("  data wait", "data_wait_us_per_step", fmt_us, None),
    ("  in ops (host side)", "op_time_us_per_step", fmt_us, "op_time_share"),
    (
        "  between ops (Python, dispatch)",
        "between_ops_us_per_step",
        fmt_us,
        "between_ops_step_share",
    ),
    (
        "    of which outside tensor ops (sleep, I/O, Python)",
        "outside_ops_us_per_step",
        fmt_us,
        "outside_ops_share",
    ),
    ("  host syncs", "sync_us_per_step", fmt_us, "sync_share"),
    ("  host-to-device copies", "h2d_us_per_step", fmt_us, "h2d_share"),
    ("  blocked in collectives", "collective_us_per_step", fmt_us, None),
    ("ops per step", "ops_per_step", fmt_count, None),
    ("  tiny ops (under {tiny})", "tiny_ops_per_step", fmt_count, None),
    ("mean time per op (host)", "mean_op_us", fmt_us, None),
    (
        "dispatch (between ops + tiny ops, outside-ops time left out)",
        None,
        fmt_us,
        "host_dispatch_share",
    ),
    ("between ops, of the time not waiting", None, fmt_us, "between_ops_share"),
    ("recorder overhead per op (removed)", "recorder_overhead_us_per_op", fmt_us, None),
)


def _dispatch_row(d: Any, label: str, key: str | None, f: Formatter, share: str | None) -> Any:
    value = num(getattr(d, key)) if key else None
    frac = num(getattr(d, share)) if share else None
    if value is None and frac is None:
        return None
    if "{tiny}" in label:
        label = label.format(tiny=fmt_us(num(d.tiny_op_us) or 25))
    return [
        Cell(label, sort=label),
        Cell(f(value), sort=value, numeric=True) if value is not None else Cell("", sort=None),
        Cell(fmt_frac(frac), sort=frac, numeric=True) if frac is not None else Cell("", sort=None),
    ]


def dispatch_section(profile: Profile) -> Section | None:
    """Where a recorded step's host time goes, per step and as a share of the step; every other
    field the recorder wrote (calibration, raw times) is in the JSON only."""
    d = profile.dispatch
    rows = [r for spec in _DISPATCH_ROWS if (r := _dispatch_row(d, *spec)) is not None]
    if not rows:
        return None
    columns = ["measure", "value", "share"]
    if all(not r[2].text for r in rows):  # a trace's dispatch: counts and times, no shares
        columns, rows = columns[:2], [r[:2] for r in rows]
    source = given(d.step_time_source)
    note = one_line(given(d.note))
    if source:
        note = f"step time: {source}. {note}" if note else f"step time: {source}"
    if num(d.data_wait_us_per_step) is not None and num(d.window_steps):
        scope = "these figures are of the recorded steps; the run's data wait is the breakdown's"
        note = f"{scope}. {note}" if note else scope
    return Section(
        "dispatch",
        "Op dispatch (host side, per step)",
        columns,
        rows,
        note=note,
    )


def _is_object(value: Any) -> bool:
    return isinstance(value, (dict, Struct))


def _items(value: dict[Any, Any] | Struct) -> list[tuple[Any, Any]]:
    """The keys and values of an object: a record's set fields, or a mapping's items."""
    return set_fields(value) if isinstance(value, Struct) else list(value.items())


def _list_text(value: Sequence[Any]) -> str:
    """A list in one cell: scalars joined (up to 8), otherwise its length."""
    if all(not _is_object(v) and not isinstance(v, list) for v in value):
        shown = ", ".join(fmt_scalar(v) for v in value[:8])
        return shown + (f", … ({len(value)} in all)" if len(value) > 8 else "") if value else "none"
    return f"{len(value)} entries"


def _value_row(name: str, key: str, value: Any) -> list[Cell]:
    """``name | value``: lists as their values or length, scalars by the unit ``key`` names."""
    if isinstance(value, list):
        return [Cell(name, sort=name), Cell(_list_text(value), sort=len(value))]
    shown = fmt_evidence_value(key, value)
    return [
        Cell(name, sort=name),
        Cell(shown, sort=sort_key(value), numeric=num(value) is not None),
    ]


def _key_value_rows(items: Iterable[tuple[Any, Any]]) -> list[list[Cell]]:
    """One row per key; a nested object one level deep as ``a.b`` rows (deeper objects left
    out: the JSON has them)."""
    rows: list[list[Cell]] = []
    for key, value in items:
        name = one_line(key)
        if not _is_object(value):
            rows.append(_value_row(name, str(key), value))
            continue
        for k2, v2 in _items(value):
            if not _is_object(v2):
                rows.append(_value_row(f"{name}.{one_line(k2)}", str(k2), v2))
    return rows


def _key_value_section(
    sec_id: str, title: str, record: Struct | None, compact: int | None = 8
) -> Section | None:
    """A flat view of a record whose fields gpuopt may extend: scalars shown with unit-aware
    formatting, nested records one level deep as ``a.b``, lists as their values or length;
    a ``note`` field becomes the section's note."""
    if record is None:
        return None
    fields = set_fields(record)
    rows = _key_value_rows((k, v) for k, v in fields if k != "note")
    if not rows:
        return None
    note = next((v for k, v in fields if k == "note"), None)
    return Section(
        sec_id,
        title,
        ["measure", "value"],
        rows[:60],
        note=one_line(note),
        compact_rows=compact if compact and len(rows) > compact else None,
    )


def ragged_section(profile: Profile) -> Section | None:
    """Shown when the batches vary at all (shapes, sizes, per-sample lists, padding); a run whose
    batches all have one shape has nothing to say here (the JSON keeps the counts)."""
    r = given(profile.ragged)
    if r is None:
        return None
    varies = (
        r.distinct_shapes > 1
        or (num(given(r.step_signatures_distinct)) or 0) > 1
        or r.variable_batch_size
        or r.batch_size_1_variable
        or r.list_batches > 0
        or (num(r.pad_fraction) or 0) > 0
    )
    if not varies:
        return None
    section = _key_value_section("ragged", "Ragged batches (training loaders)", r)
    if section is not None:
        section.rows = [row for row in section.rows if not row[0].text.startswith("loaders")]
    return section


def ragged_loaders_section(profile: Profile) -> Section | None:
    """Each DataLoader's batch sizes, evaluation loaders told apart; shown with two or more."""
    r = given(profile.ragged)
    loaders = given(r.loaders) if r is not None else None
    if not loaders or len(loaders) < 2:
        return None
    rows = [
        [
            _site(e.site),
            _scell(e.role),
            _ncell(e.batches),
            _scell(", ".join(str(b) for b in e.batch_sizes[:8])),
            _ncell(e.distinct_shapes),
        ]
        for e in loaders
    ]
    return Section(
        "ragged_loaders",
        "Batch shapes per DataLoader",
        ["loop", "role", "batches", "batch sizes", "shapes"],
        rows,
        note="train: an optimizer step followed its batches; eval: none did (an evaluation "
        "loop, a batch looked at); the ragged-batch statistics above count the batches fetched "
        "with autograd on.",
    )


def trace_section(profile: Profile) -> Section | None:
    return _key_value_section("trace", "Trace", given(profile.trace))


def gpu_sections(profile: Profile) -> list[Section]:
    entries = sorted(profile.gpu or [], key=lambda e: (e.rank, text(e.device)))
    if not entries:
        return []
    return [
        Section(
            "gpu",
            "GPU time per rank",
            ["rank", "device", "util", "idle", "compute", "non-compute", "comm overlap"],
            [_gpu_time_row(e) for e in entries],
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
            [_gpu_idle_row(e) for e in entries],
            per_rank=True,
        ),
    ]


def _gpu_time_row(e: GpuRank) -> list[Cell]:
    return [
        _ncell(e.rank),
        _scell(e.device),
        _ncell(e.utilization, fmt_frac),  # a fraction of the span
        _ncell(e.idle_pct, fmt_pct),
        _ncell(e.compute_pct, fmt_pct),
        _ncell(e.non_compute_pct, fmt_pct),
        _ncell(e.comm_overlap_pct, fmt_pct),
    ]


def _gpu_idle_row(e: GpuRank) -> list[Cell]:
    return [
        _ncell(e.rank),
        _ncell(e.idle_us.host_wait, fmt_us),
        _ncell(e.idle_us.kernel_wait, fmt_us),
        _ncell(e.idle_us.other, fmt_us),
        _ncell(e.launch.count),
        _ncell(e.launch.delay_median_us, fmt_us),
        _ncell(e.launch.short_kernels),
        _ncell(e.memcpy.count),
        _ncell(e.memcpy.time_us, fmt_us),
        _ncell(e.memcpy.bytes, fmt_bytes),
    ]


def ranks_section(profile: Profile) -> Section | None:
    entries = sorted(profile.ranks or [], key=lambda e: e.rank)
    if not entries:
        return None
    with_status = any(given(e.status) for e in entries)
    split = any(given(e.collective_wait_s_per_step) is not None for e in entries)
    rows = [_rank_row(e, with_status, split) for e in entries]
    columns = (
        ["rank"]
        + (["status"] if with_status else [])
        + ["steps", "step median", "data wait", "sync", "compute", "collectives/step"]
        + (["waiting/step", "communicating/step", "own work/step"] if split else [])
        + ["dir"]
    )
    spread = given(profile.rank_spread)
    note = _spread_note(spread) if spread is not None else ""
    if split:
        note += (" " if note else "") + (
            "collectives/step: time blocked in collectives, split into waiting for slower ranks "
            "and communicating; own work: step time less the wait (docs/distributed.md)."
        )
    return Section("ranks", "Ranks", columns, rows, note=note, per_rank=True)


def _rank_row(e: RankEntry, with_status: bool, split: bool = False) -> list[Cell]:
    bd = e.breakdown
    row = [_ncell(e.rank)] + ([_scell(given(e.status))] if with_status else [])
    row += [
        _ncell(e.steps),
        _ncell(given(e.step_time_median_s), fmt_duration),
        _ncell(bd.data_wait if bd else None, fmt_frac),
        _ncell(bd.sync if bd else None, fmt_frac),
        _ncell(bd.compute if bd else None, fmt_frac),
        _ncell(e.collective_s_per_step, fmt_duration),
    ]
    if split:
        row += [
            _ncell(given(e.collective_wait_s_per_step), fmt_duration),
            _ncell(given(e.collective_comm_s_per_step), fmt_duration),
            _ncell(given(e.own_work_s_per_step), fmt_duration),
        ]
    return row + [_scell(e.dir)]


def _spread_note(spread: RankSpread) -> str:
    ratio = num(spread.ratio)
    if ratio is None:
        return ""
    return (
        f"slowest rank {spread.slowest_rank} has a median step {ratio:.2f}× that of the "
        f"fastest, rank {spread.fastest_rank}."
    )


def _per_unit(unit: str) -> Formatter:
    """``"{v:.0f} W"``-style formatting for NVML means (MISSING where there is no number)."""

    def fmt(value: Any) -> str:
        v = num(value)
        return MISSING if v is None else f"{v:.0f} {unit}"

    return fmt


def gpu_samples_section(profile: Profile) -> Section | None:
    """``utilization.gpus``: NVML samples per GPU (utilization in percent)."""
    items = sorted(given(profile.utilization.gpus) or [], key=lambda e: e.index)
    if not items:
        return None
    rows = [
        [
            _ncell(e.index),
            _ncell(e.util_mean, fmt_pct),
            _ncell(e.process_util_mean, fmt_pct),
            _ncell(e.memory_used_max_bytes, fmt_bytes),
            _ncell(e.power_w_mean, _per_unit("W")),
            _ncell(e.sm_clock_mhz_mean, _per_unit("MHz")),
        ]
        for e in items
    ]
    return Section(
        "gpu-samples",
        "GPUs sampled (NVML)",
        ["gpu", "util mean", "this process", "memory peak", "power mean", "SM clock mean"],
        rows,
    )


def _table_section(i: int, t: Table) -> Section | None:
    """One of ``tables`` as the analysis wrote it: rows padded or cut to the column count."""
    columns = [one_line(c) for c in t.columns]
    if not columns and t.rows:
        columns = [f"col{j + 1}" for j in range(max(len(r) for r in t.rows))]
    if not columns:
        return None
    rows = []
    for r in t.rows:
        cells = []
        for j in range(len(columns)):
            v = r[j] if j < len(r) else None
            n = num(v)
            cells.append(
                Cell(fmt_scalar(v), sort=n if n is not None else text(v), numeric=n is not None)
            )
        rows.append(cells)
    sec_id = "table-" + (re.sub(r"[^A-Za-z0-9_-]+", "-", t.id).strip("-") or str(i + 1))
    title = one_line(t.title) or one_line(t.id) or f"Table {i + 1}"
    return Section(sec_id, title, columns, rows, note=one_line(t.note))


def generic_sections(profile: Profile) -> list[Section]:
    """``tables`` as analyses wrote them."""
    sections = (_table_section(i, t) for i, t in enumerate(profile.tables))
    return [s for s in sections if s is not None]


def _numeric_columns(s: Section) -> set[int]:
    """Columns with at least one number and nothing but numbers or MISSING."""
    return {
        j
        for j in range(len(s.columns))
        if any(j < len(r) and r[j].numeric for r in s.rows)
        and all(r[j].numeric or r[j].text == MISSING for r in s.rows if j < len(r))
    }


def detail_sections(profile: Profile) -> list[Section]:
    """Every detail table of the document, in report order; absent or empty ones left out."""
    sections: list[Section | None] = [
        dataloaders_section(profile),
        transfers_section(profile),
        syncs_section(profile),
        loops_section(profile),
        outside_ops_section(profile),
        dispatch_section(profile),
        *compile_sections(profile),
        ragged_section(profile),
        ragged_loaders_section(profile),
        gpu_samples_section(profile),
        *gpu_sections(profile),
        ranks_section(profile),
        *memory_sections(profile),
        *generic_sections(profile),
        trace_section(profile),
    ]
    result = []
    for s in sections:
        if s is None:
            continue
        s.numeric_columns = _numeric_columns(s)
        result.append(s)
    return result


# -- memory (docs/memory.md) ----------------------------------------------------------------------


def _est(text: str) -> str:
    return f"{text} (est.)" if text != MISSING else text


def _memory_rows(m: MemoryReport) -> list[list[Cell]]:
    """The memory summary: the device, what was measured, what was predicted, the OOM."""
    rows: list[list[Cell]] = []

    def add(
        name: str, value: Any, formatter: Formatter = fmt_bytes, estimate: bool = False
    ) -> None:
        if value is None:
            return
        shown = formatter(value)
        rows.append(
            [
                Cell(name, sort=name),
                Cell(_est(shown) if estimate else shown, sort=num(value) or shown),
            ]
        )

    add("device", m.device or "", str)
    add("capacity", m.capacity_bytes)
    me = m.measured
    if me is not None:
        add("peak allocated (measured)", me.peak_allocated_bytes)
        add("peak reserved (measured)", me.peak_reserved_bytes)
        add("reserved, not allocated", given(me.fragmentation_bytes))
    p = m.predicted
    if p is not None:
        add("batch size", p.batch_size, fmt_count)
        add("predicted peak at that batch", p.peak_bytes, estimate=True)
        add("per sample", p.bytes_per_sample, estimate=True)
        add("largest batch that fits", p.max_batch_size, fmt_count, estimate=True)
        add("margin kept free", p.margin, fmt_frac)
        add("what limits it", p.limit, str)
        add("replayed", given(p.replayed), str)
        add("prediction took", given(p.cost_s), fmt_duration)
    o = m.oom
    if o is not None:
        add("out of memory at", o.site or MISSING, str)
        add("it asked for", o.requested_bytes)
        add("batch size that fits", o.fits_batch_size, fmt_count, estimate=True)
    return rows


def _memory_note(m: MemoryReport) -> str:
    parts = []
    if m.predicted is not None:
        parts.append(
            "predicted: the first step replayed under fake tensors (no memory allocated), "
            + (given(m.predicted.device_model) or "")
        )
        parts += [n for n in given(m.predicted.notes) or [] if not n.startswith("usable")]
    if m.measured is None and m.predicted is not None:
        parts.append("nothing measured: no GPU in this run")
    if given(m.note):
        parts.append(str(given(m.note)))
    return "; ".join(p for p in parts if p)


def _category_section(m: MemoryReport) -> Section | None:
    splits = []
    if m.measured is not None and m.measured.by_category is not None:
        step = given(m.measured.tracked_step)
        splits.append(
            (f"measured (step {step})" if step is not None else "measured", m.measured.by_category)
        )
    if m.predicted is not None and m.predicted.by_category is not None:
        splits.append(
            (f"predicted, batch {fmt_count(m.predicted.batch_size)}", m.predicted.by_category)
        )
    if not splits:
        return None
    columns = ["category"]
    for name, _ in splits:
        columns += [name, "share"]
    rows = []
    for i, (category, _) in enumerate(splits[0][1].items()):
        row = [Cell(category.replace("_", " "), sort=i)]
        for _, split in splits:
            n = split.items()[i][1]
            total = split.total()
            row += [
                _bytes_cell(n),
                Cell(fmt_frac(n / total) if total else MISSING, sort=n, numeric=True),
            ]
        rows.append(row)
    return Section(
        "memory-categories",
        "Memory at the step's peak, by what holds it",
        columns,
        rows,
        note=" ".join(
            n
            for name, n in (
                (
                    "measured",
                    "measured: one step under gpuopt's tracker, 'other' is what the "
                    "allocator held beyond the tensors it saw.",
                ),
                ("predicted", "predicted: an estimate (fake tensors)."),
            )
            if any(col.startswith(name) for col in columns)
        ),
    )


def _bytes_cell(n: Any) -> Cell:
    return Cell(fmt_bytes(n), sort=num(n), numeric=True)


def _holder_rows(holders: list[MemoryHolder], source: str) -> list[list[Cell]]:
    return [
        [
            Cell(
                h.module or (given(h.category) or "").replace("_", " ") or MISSING,
                sort=h.module or "",
            ),
            Cell(one_line(h.site) or MISSING, sort=h.site or "", site=h.site or None),
            _bytes_cell(h.bytes),
            Cell(source, sort=source),
        ]
        for h in holders
    ]


def _largest_section(m: MemoryReport) -> Section | None:
    rows: list[list[Cell]] = []
    if m.measured is not None:
        rows += _holder_rows(m.measured.largest, "measured")
    if m.predicted is not None:
        rows += _holder_rows(given(m.predicted.largest) or [], "predicted (est.)")
    if not rows:
        return None
    return Section(
        "memory-largest",
        "Largest activations at the peak (module, the user's line)",
        ["module", "site", "bytes", "source"],
        rows,
        note="activation checkpointing (torch.utils.checkpoint) on the modules at the top trades "
        "their memory for one more forward of them in the backward.",
    )


def _oom_section(m: MemoryReport) -> Section | None:
    o = m.oom
    if o is None or not o.held:
        return None
    source = "snapshot" if given(o.held_source) == "snapshot" else "fake tensors (est.)"
    return Section(
        "memory-oom",
        "Out of memory: what held the memory",
        ["module or category", "site", "bytes", "source"],
        _holder_rows(o.held, source),
        note=one_line(given(o.message)),
    )


def memory_sections(profile: Profile) -> list[Section]:
    """``memory``: the summary, the split by category, the largest activations, an OOM's
    holders (none when the document has no memory part)."""
    m = given(profile.memory)
    if m is None:
        return []
    rows = _memory_rows(m)
    out = [
        Section("memory", "GPU memory", ["measure", "value"], rows, note=_memory_note(m))
        if rows
        else None,
        _category_section(m),
        _largest_section(m),
        _oom_section(m),
    ]
    return [s for s in out if s is not None]
