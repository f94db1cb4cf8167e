"""The tables a trace adds to the profile (``tables[]``, ids ``trace-*``): one function per
table, each None when it has no rows. Every renderer shows them as they are."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from gpuopt.assemble.trace_job import TraceJob
from gpuopt.assemble.trace_parts import (
    collective_s_per_step,
    measured_steps,
    ms,
    percent,
    rounded,
    step_time_median_s,
)
from gpuopt.model.profile import Scalar, Table
from gpuopt.model.trace import IDLE_CAUSES
from gpuopt.trace.kernels import top_kernels
from gpuopt.trace.steps import CATEGORIES

TOP_KERNELS_PER_TYPE = 5
TOP_IDLE_SITES = 10
TOP_SYNC_CALLS = 10
Rows = list[list[Scalar]]


def trace_tables(ta: TraceJob) -> list[Table]:
    """Every trace table that has rows, in the order the reports show them."""
    builders: tuple[Callable[[TraceJob], Table | None], ...] = (
        gpu_time_table,
        streams_table,
        idle_streams_table,
        idle_causes_table,
        idle_causes_by_step_table,
        idle_sites_table,
        step_breakdown_table,
        kernel_types_table,
        top_kernels_table,
        launch_table,
        memory_table,
        syncs_table,
        ranks_table,
    )
    return [t for build in builders if (t := build(ta)) is not None]


def _table(id_: str, title: str, columns: list[str], rows: Rows, note: str = "") -> Table | None:
    return Table(id=id_, title=title, columns=columns, rows=rows, note=note) if rows else None


def gpu_time_table(ta: TraceJob) -> Table | None:
    rows: Rows = []
    for ra in ta.ranks:
        t = ra.trace.temporal
        if t is None or t.span_us <= 0:
            continue
        rows.append(
            [
                ra.rank,
                ra.trace.device.name if ra.trace.device is not None else None,
                ms(t.span_us),
                percent(t.busy_us / t.span_us),
                rounded(t.idle_pct, 2),
                rounded(t.compute_pct, 2),
                rounded(t.non_compute_pct, 2),
                percent(ra.comm_overlap),
            ]
        )
    return _table(
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
        rows,
        "span = first GPU event start to last GPU event end; "
        "busy = time with at least one GPU event running.",
    )


def streams_table(ta: TraceJob) -> Table | None:
    return _table(
        "trace-streams",
        "Per-stream utilization",
        ["rank", "stream", "events", "busy ms", "stream span ms", "utilization %"],
        [
            [ra.rank, s.stream, s.events, ms(s.busy_us), ms(s.span_us), percent(s.utilization)]
            for ra in ta.ranks
            for s in ra.trace.streams
        ],
    )


def idle_streams_table(ta: TraceJob) -> Table | None:
    return _table(
        "trace-idle-streams",
        "Idle time per stream (HTA categories)",
        ["rank", "stream", "host wait ms", "kernel wait ms", "other ms"],
        [
            [ra.rank, r.stream, ms(r.host_wait), ms(r.kernel_wait), ms(r.other)]
            for ra in ta.ranks
            for r in ra.trace.idle_by_stream
        ],
        "host wait: the launch came after the previous GPU work ended; kernel wait: gap < 30 µs.",
    )


def _causes(ta: TraceJob) -> list[str]:
    """The idle causes of these traces: ``compiled_region`` only where a trace has regions."""
    present = {c for ra in ta.ranks for c, _ in ra.trace.idle_causes.by_cause.items()}
    return [c for c in IDLE_CAUSES if c in present or c != "compiled_region"]


def idle_causes_table(ta: TraceJob) -> Table | None:
    rows: Rows = []
    for ra in ta.ranks:
        total = ra.trace.idle_causes.idle_us
        for cause, us in ra.trace.idle_causes.by_cause.items():
            if us > 0:
                rows.append(
                    [ra.rank, cause, ms(us), rounded(100 * us / total, 1) if total else None]
                )
    return _table(
        "trace-idle-causes",
        "What the host was doing while the GPU was idle",
        ["rank", "cause", "idle ms", "% of idle"],
        rows,
        "Each idle µs is credited to the launching thread's activity, first match of: "
        f"{', '.join(_causes(ta))}.",
    )


def idle_causes_by_step_table(ta: TraceJob) -> Table | None:
    causes = _causes(ta)
    return _table(
        "trace-idle-causes-by-step",
        "GPU idle causes per step (ms)",
        ["rank", "step", "idle ms", *causes],
        [
            [ra.rank, r.step, ms(r.idle_us), *[ms(dict(r.items()).get(c, 0.0)) for c in causes]]
            for ra in ta.ranks
            for r in ra.trace.idle_causes.by_step
        ],
    )


def idle_sites_table(ta: TraceJob) -> Table | None:
    return _table(
        "trace-idle-sites",
        "Top call sites behind GPU idle time",
        ["rank", "cause", "op", "site", "idle ms"],
        [
            [ra.rank, s.cause, s.op, s.site, ms(s.idle_us)]
            for ra in ta.ranks
            for s in ra.trace.idle_causes.sites[:TOP_IDLE_SITES]
        ],
        "site: the user's Python frame, where the trace has stacks (with_stack=True).",
    )


def step_breakdown_table(ta: TraceJob) -> Table | None:
    whole = any(not ra.trace.profiler_steps for ra in ta.ranks)  # a rank's one row, step empty
    return _table(
        "trace-step-breakdown",
        "Step time breakdown (PyTorch profiler overview: each category only counts time not "
        "covered by the ones before it)",
        ["rank", "step", "step ms", *[f"{c} ms" for c in CATEGORIES]],
        [
            [ra.rank, r.step, ms(r.dur_us), *[ms(getattr(r, f"{c}_us")) for c in CATEGORIES]]
            for ra in ta.ranks
            for r in ra.trace.steps
        ],
        "Without ProfilerStep annotations the whole trace is one row (step empty)."
        if whole
        else "",
    )


def kernel_types_table(ta: TraceJob) -> Table | None:
    kt: dict[str, float] = defaultdict(float)
    for ra in ta.ranks:
        for k, us in ra.trace.kernel_types_us.items():
            kt[k] += us
    total = sum(kt.values())
    rows: Rows = (
        [
            [k, ms(us), rounded(100 * us / total, 1)]
            for k, us in sorted(kt.items(), key=lambda kv: -kv[1])
        ]
        if total
        else []
    )
    return _table(
        "trace-kernel-types",
        "GPU time by kernel type (all ranks), overlaps separate",
        ["type", "ms", "%"],
        rows,
    )


def top_kernels_table(ta: TraceJob) -> Table | None:
    return _table(
        "trace-top-kernels",
        "Top GPU kernels by total time",
        ["rank", "type", "name", "count", "total ms", "mean µs", "max µs"],
        [
            [
                ra.rank,
                k.type,
                k.name,
                k.count,
                ms(k.total_us),
                rounded(k.mean_us, 2),
                rounded(k.max_us, 2),
            ]
            for ra in ta.ranks
            for k in top_kernels(ra.trace.top_kernels, TOP_KERNELS_PER_TYPE)
        ],
    )


def launch_table(ta: TraceJob) -> Table | None:
    rows: Rows = []
    for ra in ta.ranks:
        ls = ra.trace.launch
        if not ls.count:
            continue
        rows.append(
            [
                ra.rank,
                ls.count,
                rounded(ls.cpu_duration_us.median, 2),
                rounded(ls.launch_delay_us.median, 2),
                rounded(ls.launch_delay_us.p95, 2),
                ls.short_kernels,
                ls.runtime_outliers,
                ls.launch_delay_outliers,
            ]
        )
    return _table(
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
        rows,
        "short kernel: GPU time shorter than the CPU time its launch took.",
    )


def memory_table(ta: TraceJob) -> Table | None:
    return _table(
        "trace-memory",
        "Memory copies and sets",
        ["rank", "direction", "pageable", "count", "GPU ms", "MB", "GB/s"],
        [
            [
                ra.rank,
                m.direction,
                m.pageable,
                m.count,
                ms(m.time_us),
                rounded(m.bytes / 1e6, 3),
                rounded(m.bandwidth_gbps, 2),
            ]
            for ra in ta.ranks
            for m in ra.trace.memory
        ],
    )


def syncs_table(ta: TraceJob) -> Table | None:
    rows: Rows = []
    for ra in ta.ranks:
        by_api: dict[tuple[str, str | None], list[float]] = defaultdict(list)
        for call in ra.syncs:
            by_api[(call.api, call.outer_op)].append(call.dur_us)
        top = sorted(by_api.items(), key=lambda kv: -sum(kv[1]))[:TOP_SYNC_CALLS]
        rows += [[ra.rank, api, op, len(d), ms(sum(d))] for (api, op), d in top]
    return _table(
        "trace-syncs",
        "Host-blocking sync calls",
        ["rank", "API", "issued by op", "count", "CPU ms"],
        rows,
    )


def ranks_table(ta: TraceJob) -> Table | None:
    if len(ta.ranks) < 2:
        return None
    strag = ta.straggler
    rows: Rows = []
    for ra in ta.ranks:
        late = strag.mean_lateness_us.get(ra.rank) if strag is not None else None
        rows.append(
            [
                ra.rank,
                len(measured_steps(ra)),
                rounded((step_time_median_s(ra) or 0) * 1e3, 3),
                rounded(ra.trace.temporal.idle_pct, 2) if ra.trace.temporal is not None else None,
                rounded((collective_s_per_step(ra) or 0) * 1e3, 3),
                percent(ra.comm_overlap),
                rounded(late, 1),
                strag is not None and strag.rank == ra.rank,
            ]
        )
    return _table(
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
