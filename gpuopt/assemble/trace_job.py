"""A job's traces as rank summaries, and what is measured across its ranks.

:func:`summarise_traces` turns a trace file or a folder of per-rank traces into one
:class:`~gpuopt.model.summary.RankSummary` per rank: one after another for a single file (its
decode helper splits the file), in a pool of worker processes for a folder. Each worker holds one
rank at a time (the file's columns and analyses, then only its small summary), so memory grows
with the number of workers, not of ranks; the summaries cross back as msgpack bytes.
:func:`load_summaries` reads summaries written earlier (``--summary-only``). :func:`job_of` then
checks the ranks are one job's and measures what needs them all: clock skew and the straggler.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import numpy as np

from gpuopt.assemble.rank_summary import summarise_file
from gpuopt.debug import logger
from gpuopt.errors import GpuoptError, NotATrace, say
from gpuopt.model.summary import SUMMARY_SUFFIX, RankSummary, decode_summary
from gpuopt.model.trace import Straggler
from gpuopt.trace.analysis import skew_warning
from gpuopt.trace.anomalies import clock_skew
from gpuopt.trace.files import check_ranks, subfolder_note, trace_files
from gpuopt.trace.pieces import text_size
from gpuopt.trace.ranks import straggler_of

log = logger(__name__)


if TYPE_CHECKING:
    from concurrent.futures import Future
    from multiprocessing.context import BaseContext

# A worker's peak memory on one rank, estimated from its JSON text (the decoded columns and the
# analyses' arrays): 32 MB + the text's size, measured at 0.4-0.8x the text plus ~30 MB
# (docs/benchmarks.md). Only used to cap the default number of workers by available memory.
WORKER_BASE_BYTES = 32 << 20
MSGPACK = msgspec.msgpack.Encoder()
# Below this much JSON in all, one process does a folder faster than a pool: forking the pool
# and importing its modules cost 0.05-0.1 s here (2 ranks of 1.7 MB: 0.34 s pooled, 0.28 s
# alone; docs/benchmarks.md), the same threshold as the decode helper's
# (gpuopt.trace.decode_worker.MIN_TEXT_BYTES).
POOL_MIN_TEXT_BYTES = 16 << 20
Progress = Callable[[int, int], None]  # (ranks done, ranks in all)


class TraceJob(msgspec.Struct):
    """Every rank of one job, summarised, and what was measured across them."""

    path: str
    ranks: list[RankSummary]
    load_s: float
    analyze_s: float
    filtered_last_step: bool
    straggler: Straggler | None = None
    warnings: list[str] = msgspec.field(default_factory=list)


def job_of(path: str, ranks: list[RankSummary], notes: Iterable[str] = ()) -> TraceJob:
    """The job of these summaries (their ranks checked and distinct): clock skew and the
    straggler measured across them, each rank's repairs as warnings naming it."""
    ranks = sorted(ranks, key=lambda s: s.rank)
    warnings = [f"rank {s.rank}: {note}" for s in ranks for note in s.warnings]
    spans = {
        s.rank: (s.first_us, s.last_us)
        for s in ranks
        if s.first_us is not None and s.last_us is not None
    }
    skew = clock_skew(spans)
    if skew is not None:
        warnings.append(skew_warning(*skew))
    strag = None
    if len(ranks) > 1 and skew is None:
        strag = straggler_of(
            [s.rank for s in ranks], [np.asarray(s.comm_starts_us, dtype=float) for s in ranks]
        )
    return TraceJob(
        path=path,
        ranks=ranks,
        load_s=sum(s.load_s for s in ranks),
        analyze_s=sum(s.analyze_s for s in ranks),
        filtered_last_step=any(s.filtered_last_step for s in ranks),
        straggler=strag,
        warnings=[*warnings, *notes],
    )


def job_filter_last(ranks: list[RankSummary]) -> bool:
    """HTA's rule for the whole job: drop the last step when its ranks have two or more
    ProfilerStep names between them."""
    names: set[str] = set()
    for s in ranks:
        names.update(s.step_names)
    return len(names) >= 2


def summarise_traces(
    path: Path,
    jobs: int | None = None,
    progress: Progress | None = None,
    skipped: list[str] | None = None,
) -> list[RankSummary]:
    """One summary per rank of a trace file or a folder of traces (``jobs``: worker processes,
    None to choose: :func:`default_jobs`). Bad input: a one-line GpuoptError naming the file.
    In a folder, a file that is not a trace at all (another JSON document: :class:`NotATrace`)
    is left out, with a note in ``skipped`` (on stderr when None)."""
    files = trace_files(path)
    workers = default_jobs(files) if jobs is None else max(1, min(jobs, len(files)))
    outcomes = _summarise(files, [None] * len(files), workers, progress)
    sums, files = _without_others(path, files, outcomes, skipped)
    below = subfolder_note(path)
    if below is not None:
        if skipped is None:
            say(f"gpuopt: {path}: {below}")
        else:
            skipped.append(below)
    ranks = check_ranks(path, [f.name for f in files], [s.rank_in_file for s in sums])
    for s, r in zip(sums, ranks, strict=True):
        s.rank = s.trace.rank = r
    decided = job_filter_last(sums)
    redo = [i for i, s in enumerate(sums) if s.filtered_last_step != decided]
    if redo:  # a rank with fewer step names than the job: HTA's rule is the job's, not the file's
        again = _summarise([files[i] for i in redo], [decided] * len(redo), workers, None)
        for i, again_i in zip(redo, again, strict=True):
            assert isinstance(again_i, RankSummary)  # it was one the first time
            again_i.rank = again_i.trace.rank = ranks[i]
            sums[i] = again_i
    return sums


def _without_others(
    path: Path,
    files: list[Path],
    outcomes: list[RankSummary | NotATrace],
    skipped: list[str] | None,
) -> tuple[list[RankSummary], list[Path]]:
    """The traces' summaries and files, the files that are not traces left out (a folder) or
    refused (a file given alone, or a folder of nothing else)."""
    others = [(f, o) for f, o in zip(files, outcomes, strict=True) if isinstance(o, NotATrace)]
    if not others:
        return [o for o in outcomes if isinstance(o, RankSummary)], files
    if not path.is_dir():
        raise others[0][1]
    if len(others) == len(files):
        raise GpuoptError(
            f"{path}: nothing to report: none of its {len(files)} .json files is a PyTorch "
            f"profiler trace (e.g. {others[0][1]})"
        )
    for f, exc in others:
        note = f"{f.name}: skipped: {str(exc).split(': ', 1)[-1]}"
        if skipped is None:
            say(f"gpuopt: {path}/{note}")
        else:
            skipped.append(note)
    kept = [(f, o) for f, o in zip(files, outcomes, strict=True) if isinstance(o, RankSummary)]
    return [o for _, o in kept], [f for f, _ in kept]


def default_jobs(files: list[Path]) -> int:
    """Worker processes for ``files``: one per usable core, no more than the files, and no more
    than the available memory holds at the largest file's estimated peak (one rank each); one
    (no pool) below :data:`POOL_MIN_TEXT_BYTES` of JSON in all."""
    if len(files) < 2:
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError) as exc:
        log.debug("sched_getaffinity failed (%s): cpu_count instead", exc)
        cores = os.cpu_count() or 1
    sizes = [text_size(f) for f in files]
    if sum(sizes) < POOL_MIN_TEXT_BYTES:
        return 1
    biggest = max(sizes)
    avail = _available_memory()
    by_memory = avail // (WORKER_BASE_BYTES + biggest) if avail else cores
    return int(max(1, min(cores, len(files), by_memory)))


def _available_memory() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError) as exc:
        log.debug("MemAvailable not read: %s", exc)
    return 0


def _summarise(
    files: list[Path],
    filter_last: list[bool | None],
    workers: int,
    progress: Progress | None,
) -> list[RankSummary | NotATrace]:
    """Each file's summary, or the :class:`NotATrace` it raised (several files only)."""
    if workers <= 1 or len(files) < 2:
        out: list[RankSummary | NotATrace] = []
        for i, (f, fl) in enumerate(zip(files, filter_last, strict=True)):
            try:
                out.append(summarise_file(f, fl))
            except NotATrace as exc:
                if len(files) < 2:
                    raise
                out.append(exc)
            if progress is not None:
                progress(i + 1, len(files))
        return out
    return _pool(files, filter_last, workers, progress)


def _pool(
    files: list[Path], filter_last: list[bool | None], workers: int, progress: Progress | None
) -> list[RankSummary | NotATrace]:
    """The files' summaries from ``workers`` processes, in the files' order. The first bad file
    (in the files' order) is the error, with how many others failed."""
    # imported here: 35 ms that a single trace file's report does not need
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    # built here: 1.8 ms (RankSummary's types) that a single trace file's report does not need
    summaries = msgspec.msgpack.Decoder(RankSummary)
    results: list[RankSummary | NotATrace | None] = [None] * len(files)
    errors: dict[int, str] = {}
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=_fork_context(), initializer=_worker_init
    ) as pool:
        futures: dict[Future[bytes], int] = {
            pool.submit(_worker, str(f), fl): i
            for i, (f, fl) in enumerate(zip(files, filter_last, strict=True))
        }
        done = 0
        for fut in as_completed(futures):
            i = futures[fut]
            try:
                results[i] = summaries.decode(fut.result())
            except NotATrace as exc:
                results[i] = exc
            except GpuoptError as exc:
                errors[i] = str(exc)
            except BrokenProcessPool:
                errors[i] = (
                    f"{files[i]}: a worker process died while analysing it (out of memory?); "
                    "try fewer workers: --jobs 1"
                )
            done += 1
            if progress is not None:
                progress(done, len(files))
    if errors:
        first = min(errors)
        more = len(errors) - 1
        raise GpuoptError(
            errors[first] + (f" (and {more} other trace{'s' if more > 1 else ''})" if more else "")
        )
    return [r for r in results if r is not None]


def _fork_context() -> BaseContext:
    """Fork where the platform has it: workers start at once, sharing the parent's imports."""
    import multiprocessing

    if sys.platform == "linux":
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def _worker_init() -> None:  # pragma: no cover - runs in the worker processes
    os.environ["GPUOPT_TRACE_WORKERS"] = "0"  # one process per rank: no decode helper of its own


def _worker(file: str, filter_last: bool | None) -> bytes:  # pragma: no cover - in a worker
    return MSGPACK.encode(summarise_file(Path(file), filter_last))


def load_summaries(paths: list[Path]) -> list[RankSummary]:
    """Rank summaries from files (``*.summary.json``) and folders of them; their ranks must be
    one job's, one each. Bad input: a one-line GpuoptError naming the file."""
    files: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(
                q for q in p.iterdir() if q.name.endswith(SUMMARY_SUFFIX) and q.is_file()
            )
            if not found:
                raise GpuoptError(f"{p}: no rank summaries (*{SUMMARY_SUFFIX}) in this folder")
            files += found
        else:
            files.append(p)
    sums = []
    for f in files:
        try:
            data = f.read_bytes()
        except OSError as exc:
            raise GpuoptError(f"{f}: cannot read: {exc.strerror or exc}") from None
        sums.append(decode_summary(data, str(f)))
    label = Path(" ".join(str(p) for p in paths))  # names every path given, in messages
    check_ranks(label, [str(f) for f in files], [s.rank_in_file for s in sums], "summaries")
    return sums
