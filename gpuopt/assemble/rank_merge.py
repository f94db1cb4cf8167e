"""One Profile for a multi-process run: rank 0's document, plus a row per rank, the split of
each rank's collective time into waiting and communicating, the Ring-AllReduce estimate, and
which rank failed and how (docs/distributed.md).

**Waiting versus communicating**, without comparing clocks across hosts: a collective cannot
finish before its last rank arrives, and it finishes at (nearly) the same moment on every rank.
So in each step the rank blocked least in collectives is the one that arrived last: its blocked
time is communication; every other rank's excess over it is time spent waiting for slower
ranks. This is exact when one rank arrives last at every collective of a step (a straggler); when
different ranks are last at different collectives of one step, it under-states the wait.
Steps are matched by index (every rank of a data-parallel job runs the same steps).
"""

from __future__ import annotations

import statistics

import msgspec

from gpuopt.assemble.distributed_tables import distributed_tables
from gpuopt.assemble.ring_model import nominal_link, ring_allreduce
from gpuopt.model.document import empty_profile
from gpuopt.model.profile import (
    DistributedRun,
    Profile,
    RankEntry,
    RankSpread,
    RingAllReduce,
    RunError,
    Status,
    StepRecord,
)
from gpuopt.model.records import given

# Errors a rank raises because another rank failed first (its peer's sockets closed, the
# launcher stopped it): never the root cause when a rank with another error exists.
_CONSEQUENCES = ("SIGTERM", "Killed", "DistBackendError", "DistNetworkError", "DistStoreError")
_PEER_GONE = ("connection closed by peer", "connection reset by peer", "broken pipe", "timed out")


def merged_status(statuses: list[Status], exit_code: int) -> Status:
    """The job's status: interrupted when the launcher was (Ctrl-C), else error if any rank
    failed or the launcher exited non-zero (ranks the launcher stopped because another failed are
    part of that failure), else interrupted if a rank was, else ok."""
    if exit_code == 130:
        return "interrupted"
    if "error" in statuses:
        return "error"
    if "interrupted" in statuses:
        return "interrupted" if exit_code in (0, 143) else "error"
    return "error" if exit_code != 0 else "ok"


def merge_ranks(
    ranks: list[tuple[str, Profile]], exit_code: int, script: str, argv: list[str]
) -> Profile:
    """``ranks``: each rank's run directory (relative to the job's) and Profile, rank order.
    The findings are not evaluated here (``gpuopt.findings.engine.add_findings``)."""
    if ranks:
        doc = msgspec.structs.replace(ranks[0][1])
        doc.warnings = list(doc.warnings)
    else:
        doc = empty_profile(script, argv)
        doc.warnings = ["no rank wrote a profile: the launcher failed before any rank started"]
    doc.rank = None
    built = [(_entry(i, rank_dir, p), p) for i, (rank_dir, p) in enumerate(ranks)]
    entries = [e for e, _ in built] + _missing(ranks, exit_code, doc.warnings)
    entries.sort(key=lambda e: e.rank)
    doc.ranks = entries
    _split_waits(entries, {e.rank: p for e, p in built})
    doc.status = merged_status([given(e.status) or "ok" for e in entries], exit_code)
    doc.exit_code = exit_code if exit_code != 0 or doc.status == "ok" else _first_code(entries)
    _failure(doc, entries)
    _spread(doc, entries)
    _ring(doc, [p for _, p in ranks])
    _tables(doc, [p for _, p in ranks])
    return doc


# -- one row per rank ------------------------------------------------------------------------
def measured_steps(p: Profile) -> list[StepRecord]:
    """The steps a rank's statistics cover: after warm-up, outside the recorder's window (all
    after warm-up when the window covered them all)."""
    after = [r for r in p.steps.series if not r.warmup]
    kept = [r for r in after if r.instrumented is not True]
    return kept or after


def _entry(i: int, rank_dir: str, p: Profile) -> RankEntry:
    steps = measured_steps(p)
    dist = given(p.distributed)
    coll = [float(given(r.collective_s) or 0.0) for r in steps]
    entry = RankEntry(
        rank=p.rank if isinstance(p.rank, int) else (dist.rank if dist else i),
        dir=rank_dir,
        status=p.status,
        steps=p.steps.count,
        step_time_median_s=p.steps.time_s.median,
        step_time_mean_s=p.steps.time_s.mean,
        breakdown=p.breakdown,
        collective_s_per_step=statistics.fmean(coll) if dist is not None and coll else None,
        exit_code=p.exit_code,
    )
    err = given(p.error)
    if err is not None:
        entry.error = err
    if dist is not None:
        entry.node_rank, entry.local_rank, entry.hostname = (
            dist.node_rank,
            dist.local_rank,
            dist.hostname,
        )
    return entry


def _missing(
    ranks: list[tuple[str, Profile]], exit_code: int, warnings: list[str]
) -> list[RankEntry]:
    """Rows for the ranks of the job that wrote no profile here: failed on a node whose ranks
    are here (killed before gpuopt could write), or on another node (a warning: merge the
    nodes' directories)."""
    dists = [d for _, p in ranks if (d := given(p.distributed)) is not None]
    world = max((d.world_size for d in dists), default=0)
    present = {d.rank for d in dists}
    local = max((d.local_world_size or 0 for d in dists), default=0)
    nodes = {d.node_rank for d in dists if d.node_rank is not None}
    out, elsewhere = [], []
    for k in range(world):
        if k in present:
            continue
        if local and nodes and k // local not in nodes:
            elsewhere.append(k)
            continue
        out.append(
            RankEntry(
                rank=k,
                dir=f"rank-{k}",
                steps=0,
                breakdown=None,
                status="error",
                exit_code=exit_code or 1,
                error=RunError(
                    type="NoProfile",
                    message="the rank wrote no profile (killed before gpuopt could write one: "
                    "SIGKILL, the OOM killer, or it never started)",
                ),
            )
        )
    if elsewhere:
        which = f"rank {elsewhere[0]}" if len(elsewhere) == 1 else f"ranks {_ranges(elsewhere)}"
        warnings.append(
            f"{which} of the job's {world} ran on other nodes and are not in this directory: "
            "merge the nodes' directories with gpuopt report DIR1 DIR2 ..."
        )
    return out


def _ranges(ks: list[int]) -> str:
    return ", ".join(str(k) for k in ks) if len(ks) <= 4 else f"{ks[0]}-{ks[-1]}"


def _split_waits(entries: list[RankEntry], profiles: dict[int, Profile]) -> None:
    """Each rank's collective time split into waiting for slower ranks and communicating, and
    its own work (step time less the wait), over the steps every rank measured."""
    series = {
        k: {r.index: r for r in measured_steps(p)}
        for k, p in profiles.items()
        if given(p.distributed) is not None
    }
    if len(series) < 2:
        return
    common = sorted(set.intersection(*(set(s) for s in series.values())))
    if not common:
        return
    least = {
        i: min(float(given(s[i].collective_s) or 0.0) for s in series.values()) for i in common
    }
    for e in entries:
        s = series.get(e.rank)
        if s is None:
            continue
        waits = [float(given(s[i].collective_s) or 0.0) - least[i] for i in common]
        wait = statistics.fmean(waits)
        blocked = statistics.fmean(float(given(s[i].collective_s) or 0.0) for i in common)
        step = statistics.fmean(s[i].time_s for i in common)
        e.collective_wait_s_per_step = wait
        e.collective_comm_s_per_step = max(blocked - wait, 0.0)
        e.own_work_s_per_step = max(step - wait, 0.0)


# -- failures ---------------------------------------------------------------------------------
def _is_consequence(err: RunError) -> bool:
    msg = err.message.lower()
    return err.type in _CONSEQUENCES or any(s in msg for s in _PEER_GONE)


def _failure(doc: Profile, entries: list[RankEntry]) -> None:
    """Which rank failed and how: the merged ``error`` (the root cause: a rank whose error is
    not a consequence of another's, lowest rank first) and one warning per failed rank."""
    failed = [e for e in entries if given(e.status) not in (None, "ok")]
    if not failed:
        return
    causes = [e for e in failed if (err := given(e.error)) is None or not _is_consequence(err)]
    root = (causes or failed)[0]
    err = given(root.error)
    # shown as "<type>: <message>": "RuntimeError: rank 1 failed: CUDA out of memory"
    how = _first_line(err.message) if err else f"exit code {given(root.exit_code)}"
    doc.error = RunError(
        type=err.type if err else "RankFailed", message=f"rank {root.rank} failed: {how}"
    )
    for e in failed:
        e_err = given(e.error)
        what = f"{e_err.type}: {_first_line(e_err.message)}" if e_err else given(e.status)
        code = given(e.exit_code)
        tail = f" (exit code {code})" if code is not None else ""
        lead = "failed" if e is root else "ended"
        doc.warnings.append(f"rank {e.rank} {lead}: {what}{tail}")


def _first_line(message: str, limit: int = 200) -> str:
    """A rank's error as one line of a warning (its first line, cut at ``limit``)."""
    line = next((ln.strip() for ln in message.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _first_code(entries: list[RankEntry]) -> int:
    codes = [c for e in entries if (c := given(e.exit_code))]
    return codes[0] if codes else 1


def _spread(doc: Profile, entries: list[RankEntry]) -> None:
    medians = [
        (m, e.rank)
        for e in entries
        if isinstance(m := given(e.step_time_median_s), float) and m > 0
    ]
    if len(medians) > 1:
        slow, fast = max(medians), min(medians)
        doc.rank_spread = RankSpread(
            slowest_rank=slow[1], fastest_rank=fast[1], ratio=slow[0] / fast[0]
        )


# -- the Ring-AllReduce estimate ----------------------------------------------------------------
def _ring(doc: Profile, profiles: list[Profile]) -> None:
    """The job's ``distributed`` record (rank 0's) with the Ring-AllReduce estimate of its first
    DDP model: each bucket's time on the rank that arrived last (least time), summed."""
    dists = [d for p in profiles if (d := given(p.distributed)) is not None]
    base = given(doc.distributed)
    if base is None or not dists:
        return
    doc.distributed = base = msgspec.structs.replace(base)
    ring = ring_of_job(dists, doc)
    if ring is not None:
        base.ring = ring


def _tables(doc: Profile, profiles: list[Profile]) -> None:
    runs = [d for p in profiles if (d := given(p.distributed)) is not None]
    job = given(doc.distributed)
    if not runs:
        return
    runs = [job if job is not None and d.rank == job.rank else d for d in runs]
    tables = distributed_tables(runs)
    ids = {t.id for t in tables}
    doc.tables = [t for t in doc.tables if t.id not in ids] + tables


def ring_of_job(dists: list[DistributedRun], doc: Profile) -> RingAllReduce | None:
    """The estimate from every rank's first DDP model (None: fewer than two ranks with one, or
    buckets that differ between ranks)."""
    runs = [d for d in dists if d.ddp]
    if len(runs) < 2:
        return None
    first = runs[0].ddp[0]
    n = len(first.bucket_bytes)
    if n == 0 or any(len(d.ddp[0].bucket_time_s) != n for d in runs):
        return None
    times: list[float] = []
    for b in range(n):
        known = [t for d in runs if (t := d.ddp[0].bucket_time_s[b]) is not None]
        if not known:
            return None
        times.append(min(known))
    nodes = len({d.node_rank for d in runs if d.node_rank is not None}) or 1
    world = max(d.world_size for d in runs)
    nominal = nominal_link(runs[0].backend, doc.environment.gpus, nodes)
    return ring_allreduce(world, list(first.bucket_bytes), times, nominal)
