"""One trace file → one :class:`~gpuopt.model.summary.RankSummary`: the unit of work of
``gpuopt report`` on a folder of ranks (one per worker process) and what ``--summary-only``
writes.

:func:`summarise_file` decodes and analyses one file and keeps what the profile takes from it
(:func:`summarise`); the columns and the rank's view are dropped before it returns, so a worker's
memory is that of the one rank it holds. The job-wide parts (HTA's last-step rule across ranks,
rank checks, clock skew, the straggler) are :mod:`gpuopt.assemble.trace_job`'s.
"""

from __future__ import annotations

import time
from pathlib import Path

from gpuopt.assemble.trace_parts import trace_rank
from gpuopt.model.summary import RankSummary
from gpuopt.trace.analysis import RankAnalysis, analyze_columns, time_range
from gpuopt.trace.decode import load_columns
from gpuopt.trace.files import rank_of
from gpuopt.trace.gpu_lag import lag_warning
from gpuopt.trace.prepare import count_step_names
from gpuopt.trace.ranks import comm_starts


def summarise(
    ra: RankAnalysis,
    *,
    rank_in_file: int | None,
    filtered_last_step: bool,
    step_names: list[str],
    load_s: float = 0.0,
    analyze_s: float = 0.0,
) -> RankSummary:
    """What the profile, its tables and the cross-rank analyses take from one rank."""
    span = time_range(ra.view)
    return RankSummary(
        rank=ra.rank,
        rank_in_file=rank_in_file,
        file=ra.file,
        filtered_last_step=filtered_last_step,
        step_names=sorted(step_names),
        trace=trace_rank(ra),
        comm_overlap=ra.comm_overlap,
        communication_us=ra.communication_us,
        collective_us=ra.collective_us,
        exposed_collective_us=ra.exposed_collective_us,
        host_ops=ra.host_ops.count,
        host_op_mean_us=ra.host_ops.mean_us,
        syncs=ra.syncs,
        comm_starts_us=comm_starts(ra.view).tolist(),
        first_us=None if span is None else span[0],
        last_us=None if span is None else span[1],
        warnings=[*ra.view.notes, *([] if ra.gpu_lag is None else [lag_warning(ra.gpu_lag)])],
        load_s=load_s,
        analyze_s=analyze_s,
    )


def summarise_file(path: Path, filter_last: bool | None = None) -> RankSummary:
    """Decode and analyse one trace file (``filter_last``: HTA's last-step rule as the job
    decided it; None: the file's own decision). Bad input: a one-line GpuoptError."""
    t0 = time.perf_counter()
    cols = load_columns(path)
    t1 = time.perf_counter()
    rank_in_file = rank_of(cols.metadata)
    names = sorted(count_step_names(cols))
    if filter_last is None:
        filter_last = len(names) >= 2
    ra = analyze_columns(
        cols, rank_in_file if rank_in_file is not None else 0, filter_last, str(path)
    )
    del cols
    return summarise(
        ra,
        rank_in_file=rank_in_file,
        filtered_last_step=filter_last,
        step_names=names,
        load_s=t1 - t0,
        analyze_s=time.perf_counter() - t1,
    )
