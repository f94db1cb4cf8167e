"""One rank's ``distributed`` record and per-step collective time, from the collectives probe
(pure: the probe's capture and the run's measured steps in, records out).

Per-step figures are means over the measured steps (after warm-up, outside the recorder's
window), as every per-step figure of the document; a bucket's time is its median over them.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import TYPE_CHECKING

from gpuopt.debug import logger
from gpuopt.model.profile import CollectiveOp, DdpModel, DistributedRun

if TYPE_CHECKING:  # imported where a run has collectives: a single process never does
    from gpuopt.probes.collectives import CollectiveCapture, DdpCapture, Key, OpTotals

log = logger(__name__)


def step_collective_s(capture: CollectiveCapture) -> dict[int, float]:
    """Seconds each step was blocked in collectives (steps without any: absent)."""
    return {i: st.blocked_s for i, st in capture.steps.items() if st.blocked_s > 0}


def distributed_record(capture: CollectiveCapture, measured: list[int]) -> DistributedRun:
    """The rank's record: who it is in the job, its collectives and DDP models per step."""
    rank = capture.rank if capture.rank is not None else 0
    out = DistributedRun(
        backend=capture.backend,
        world_size=capture.world_size or 1,
        rank=rank,
        local_rank=capture.local_rank,
        local_world_size=capture.local_world_size,
        node_rank=capture.node_rank,
        hostname=capture.hostname,
        job_id=capture.job_id,
        restart=capture.restart,
        collectives=collective_ops(capture, measured),
        ddp=[ddp_model(d, measured) for d in capture.ddp],
    )
    notes = list(capture.notes) + [n for d in capture.ddp if (n := _ddp_note(d))]
    if not measured:
        notes.append("no measured step: per-step figures are empty")
    if notes:
        out.note = "; ".join(dict.fromkeys(notes))
    return out


def collective_ops(capture: CollectiveCapture, measured: list[int]) -> list[CollectiveOp]:
    """Every kind of collective seen in the measured steps, most blocked time first."""
    from gpuopt.probes.collectives import OpTotals

    n = len(measured)
    totals: dict[Key, OpTotals] = defaultdict(OpTotals)
    for i in measured:
        st = capture.steps.get(i)
        for key, t in (st.by_key if st is not None else {}).items():
            acc = totals[key]
            acc.calls += t.calls
            acc.bytes += t.bytes
            acc.span_s += t.span_s
            acc.spans += t.spans
            acc.blocked_s += t.blocked_s
    ops = []
    for (op, origin, site, backend, size, source), t in totals.items():
        # launch-to-completion over every call: the known spans, scaled to the calls made
        span = t.span_s * t.calls / t.spans / n if t.spans else None
        ops.append(
            CollectiveOp(
                op=op,
                origin=origin,
                site=site,
                backend=backend,
                group_size=size,
                calls_per_step=_per_step(t.calls, n),
                bytes_per_step=_per_step(t.bytes, n),
                time_s_per_step=span,
                blocked_s_per_step=t.blocked_s / n if source == "host" else None,
                source=source,
            )
        )
    ops.sort(key=lambda o: -(o.blocked_s_per_step or o.time_s_per_step or 0.0))
    return ops


def ddp_model(d: DdpCapture, measured: list[int]) -> DdpModel:
    """One DDP model's buckets and overlap over the measured steps."""
    n = max(len(measured), 1)
    steps = [d.steps[i] for i in measured if i in d.steps]
    indices = sorted(d.bucket_bytes)
    spans: dict[int, list[float]] = defaultdict(list)
    for st in steps:
        for index, values in st.bucket_spans.items():
            spans[index].extend(values)
    comm = sum(st.comm_s for st in steps)
    host = d.timer is None or d.timer.source == "host"
    info = d.info
    return DdpModel(
        site=d.site,
        buckets=len(indices),
        bucket_bytes=[d.bucket_bytes[i] for i in indices],
        bucket_time_s=[statistics.median(spans[i]) if spans.get(i) else None for i in indices],
        grad_bytes=sum(d.bucket_bytes.values()),
        bucket_cap_bytes=_int(info.get("bucket_cap_bytes")),
        gradient_as_bucket_view=_flag(info.get("gradient_as_bucket_view")),
        static_graph=d.static_graph,
        find_unused_parameters=_flag(info.get("find_unused_parameters")),
        comm_hook=d.user_hook or d.builtin_hook,
        syncs_per_step=sum(st.rounds for st in steps) / n,
        forwards_per_step=sum(st.forwards for st in steps) / n,
        exposed_s_per_step=sum(st.exposed_s for st in steps) / n if host else None,
        overlapped_share=sum(st.overlapped_s for st in steps) / comm if comm > 0 else None,
    )


def _ddp_note(d: DdpCapture) -> str | None:
    where = f" (built at {d.site})" if d.site else ""
    if d.builtin_hook is not None:
        return (
            f"DDP model{where} uses a built-in C++ communication hook ({d.builtin_hook}): its "
            "all-reduce is not timed"
        )
    if not d.installed:
        return f"DDP model{where} never ran a training forward: its all-reduce is not timed"
    return None


def _per_step(total: int, n: int) -> int | float:
    if n <= 0:
        return 0
    v = round(total / n, 3)
    return int(v) if float(v).is_integer() else v


def _int(v: object) -> int | None:
    try:
        return int(v) if v is not None else None  # type: ignore[call-overload]
    except (TypeError, ValueError) as exc:
        log.debug("%r is not an integer: %s", v, exc)
        return None


def _flag(v: object) -> bool | None:
    return None if v is None else bool(v)
