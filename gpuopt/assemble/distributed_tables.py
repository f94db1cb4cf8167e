"""The tables a merged multi-rank run adds to its document (every report format shows them):
each rank's collectives and DDP all-reduce, and the Ring-AllReduce estimate."""

from __future__ import annotations

from gpuopt.model.profile import DistributedRun, RingAllReduce, Scalar, Table

Rows = list[list[Scalar]]


def _sig(x: float | None) -> float | None:
    """Three significant digits: a table cell, not a measurement's precision (the document's
    records keep the full value)."""
    return None if x is None else float(f"{x:.3g}")


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else _sig(seconds * 1e3)


def _mb(n: float | None) -> float | None:
    return None if n is None else _sig(n / 2**20)


def distributed_tables(runs: list[DistributedRun]) -> list[Table]:
    """The tables of a job whose ranks wrote ``runs`` (rank order)."""
    out = [t for t in (collectives_table(runs), ddp_table(runs)) if t is not None]
    ring = next((r for d in runs if (r := _ring(d)) is not None), None)
    if ring is not None:
        out.append(ring_table(ring))
    return out


def _ring(d: DistributedRun) -> RingAllReduce | None:
    return d.ring if isinstance(d.ring, RingAllReduce) else None


def collectives_table(runs: list[DistributedRun]) -> Table | None:
    rows: Rows = []
    for d in runs:
        for op in d.collectives:
            rows.append(
                [
                    d.rank,
                    op.op,
                    op.origin,
                    op.site,
                    op.group_size,
                    op.calls_per_step,
                    _mb(op.bytes_per_step),
                    _ms(op.time_s_per_step),
                    _ms(op.blocked_s_per_step),
                    op.source,
                ]
            )
    if not rows:
        return None
    return Table(
        id="collectives",
        title="Collectives per rank (per measured step)",
        columns=[
            "rank",
            "op",
            "origin",
            "site",
            "group",
            "calls/step",
            "MiB/step",
            "launch→done ms/step",
            "blocked ms/step",
            "timed on",
        ],
        rows=rows,
        note="blocked: the calling thread waited (the call, or work.wait()); launch→done "
        "includes time that overlapped the rank's own work. origin explicit: the script's own "
        "call; fsdp/ddp/torch: called inside torch. timed on host: gloo and CPU backends; "
        "nccl-work: NCCL's GPU timing (GPU-only).",
    )


def ddp_table(runs: list[DistributedRun]) -> Table | None:
    rows: Rows = []
    settings: list[str] = []
    for d in runs:
        for m in d.ddp:
            known = [t for t in m.bucket_time_s if t is not None]
            rows.append(
                [
                    d.rank,
                    m.buckets,
                    _mb(m.grad_bytes),
                    m.syncs_per_step,
                    m.forwards_per_step,
                    _ms(sum(known)) if known else None,
                    _ms(m.exposed_s_per_step),
                    None if m.overlapped_share is None else round(m.overlapped_share * 100, 1),
                ]
            )
            setting = (
                f"DDP built at {m.site or 'an unknown line'}: bucket_cap_mb "
                f"{_mb(m.bucket_cap_bytes)}, gradient_as_bucket_view "
                f"{m.gradient_as_bucket_view}, static_graph {m.static_graph}, "
                f"find_unused_parameters {m.find_unused_parameters}, comm hook "
                f"{m.comm_hook or 'none (DDP default)'}"
            )
            if setting not in settings:
                settings.append(setting)
    if not rows:
        return None
    return Table(
        id="ddp",
        title="DDP gradient all-reduce per rank (per measured step)",
        columns=[
            "rank",
            "buckets",
            "gradient MiB",
            "all-reduces/step",
            "forwards/step",
            "buckets ms",
            "exposed ms/step",
            "overlapped %",
        ],
        rows=rows,
        note="; ".join(settings) + ". buckets ms: the buckets' median all-reduce times, summed "
        "(waiting for slower ranks included); exposed: from the last bucket's launch (backward's "
        "compute done) until every bucket completed, which the step waits for; overlapped: the "
        "share of the all-reduce that ran during backward.",
    )


def ring_table(r: RingAllReduce) -> Table:
    rows: Rows = [
        ["ranks (N)", r.world_size],
        ["MiB per gradient all-reduce", _mb(r.bytes)],
        ["buckets", r.buckets],
        ["communicating ms (last-arriving rank, per bucket, summed)", _ms(r.time_s)],
        ["algorithm bandwidth GB/s (bytes / time)", _sig(r.algo_gbps)],
        ["bus bandwidth GB/s (2(N-1)/N x bytes / time)", _sig(r.bus_gbps)],
        ["nominal link GB/s", r.nominal_gbps],
        [
            "bus bandwidth, of nominal %",
            None if r.efficiency is None else round(r.efficiency * 100, 1),
        ],
        ["per-call cost ms (fit over the buckets)", _ms(r.latency_s)],
        [
            "bandwidth GB/s (fit over the buckets)",
            _sig(r.bandwidth_gbps),
        ],
    ]
    nominal = (
        f"nominal: {r.nominal_source}."
        if r.nominal_source
        else "nominal bandwidth: not known for this link (gloo over TCP, or between nodes)."
    )
    return Table(
        id="ring-allreduce",
        title="Ring-AllReduce model of the gradient all-reduce (an ESTIMATE)",
        columns=["measure", "value"],
        rows=rows,
        note=f"estimate, model: {r.model}. {nominal} The fit needs two bucket sizes or more.",
    )
