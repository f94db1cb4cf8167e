"""``gpuopt.load(path)``: one reader for every input gpuopt accepts, giving a typed Profile.

* a run directory, or a ``profile.json`` (any file whose first bytes name the schema): decoded
  and validated (:func:`gpuopt.model.document.load_profile`);
* a PyTorch profiler (Kineto) trace, ``.json`` or ``.json.gz``, or a folder of per-rank traces:
  analysed into a profile (:mod:`gpuopt.trace` measures, the assembly builds the document); a
  folder's ranks in worker processes;
* rank summaries (``gpuopt.summary/1``, ``gpuopt report --summary-only``): files, folders of
  them, several at once: merged into the job's profile (:func:`load_paths`);
* several run directories of one multi-rank job (one per node, each with its ``rank-N``
  directories): its ranks merged into one profile (:func:`load_paths`).

Bad input of any kind is a one-line :class:`~gpuopt.errors.GpuoptError`; nothing is executed or
unpickled.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gpuopt.debug import logger
from gpuopt.errors import GpuoptError
from gpuopt.model.document import load_profile
from gpuopt.model.profile import Profile
from gpuopt.model.records import given
from gpuopt.paths import regular_input

log = logger(__name__)


if TYPE_CHECKING:
    from gpuopt.assemble.trace_job import Progress

TRACE_SUFFIXES = (".json.gz", ".json")


def looks_like_profile(path: Path) -> bool:
    """A gpuopt profile (not a Kineto trace)? Decided from the first bytes, never a full parse."""
    if path.name == "profile.json":
        return True
    if path.name.endswith(".gz"):
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise GpuoptError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return b'"gpuopt.profile/' in head


def is_summary(path: Path) -> bool:
    """A rank summary, or a folder holding rank summaries and no trace (decided from names and
    first bytes, never a full parse)? A folder with both is refused."""
    from gpuopt.model.summary import SUMMARY_SUFFIX, looks_like_summary

    if path.is_dir():
        names = [p.name for p in path.iterdir() if p.is_file()]
        sums = sum(n.endswith(SUMMARY_SUFFIX) for n in names)
        traces = sum(
            n.endswith(TRACE_SUFFIXES) and not n.endswith(SUMMARY_SUFFIX) and n != "profile.json"
            for n in names
        )
        if sums and traces:
            raise GpuoptError(
                f"{path}: holds both traces and rank summaries (*{SUMMARY_SUFFIX}); "
                "keep the summaries in a folder of their own"
            )
        return sums > 0 and not (path / "profile.json").exists()
    if path.name.endswith(SUMMARY_SUFFIX):
        return True
    if path.name.endswith(".gz"):
        return False
    try:
        with path.open("rb") as fh:
            return looks_like_summary(fh.read(256))
    except OSError as exc:
        raise GpuoptError(f"{path}: cannot read: {exc.strerror or exc}") from None


def one_job(paths: list[Path]) -> Profile | None:
    """Several paths merged into their job's profile when they are one job: all rank summaries
    (files or folders of them), or the run directories of one multi-rank job's nodes (each
    rank read once). None for anything else (a path that is missing, a trace, separate runs):
    ``gpuopt report`` renders those one by one."""
    if len(paths) < 2 or not all(p.exists() for p in paths):
        return None
    kinds = [is_summary(p) for p in paths]
    if all(kinds):
        return _from_summaries(paths)
    if any(kinds):
        return None
    ranks = job_ranks(paths)
    return _merge_job(paths, ranks) if ranks is not None else None


def load_paths(
    paths: list[Path], jobs: int | None = None, progress: Progress | None = None
) -> Profile:
    """One path as :func:`load`; several: rank summaries (files or folders of them) of one job,
    or the run directories of one multi-rank job's nodes, merged (:func:`one_job`). ``jobs``:
    worker processes for a folder of traces (None: one per core)."""
    for p in paths:
        if not p.exists():
            raise GpuoptError(f"{p}: no such file or directory")
        regular_input(p)
    if len(paths) == 1:
        return load(paths[0], jobs, progress)
    job = one_job(paths)
    if job is not None:
        return job
    from gpuopt.model.summary import SUMMARY_SUFFIX

    odd = next(p for p in paths if not is_summary(p))
    raise GpuoptError(
        f"{odd}: several paths are merged only as rank summaries (*{SUMMARY_SUFFIX}: gpuopt "
        "report DIR --summary-only -o OUT) or as the run directories of one multi-rank job's "
        "nodes; for traces, put one job's per-rank traces in one folder"
    )


def load(path: Path | str, jobs: int | None = None, progress: Progress | None = None) -> Profile:
    """The profile of a run directory, a ``profile.json``, a trace file, a folder of traces, a
    rank summary or a folder of them."""
    path = Path(path)
    if not path.exists():
        raise GpuoptError(f"{path}: no such file or directory")
    regular_input(path)  # a FIFO would block the read forever, a device never end it
    if path.is_dir():
        if (path / "profile.json").exists():
            return load_profile(path)
        if is_summary(path):
            return _from_summaries([path])
        return _from_traces(path, jobs, progress)
    if looks_like_profile(path):
        return load_profile(path)
    if is_summary(path):
        return _from_summaries([path])
    if not path.name.endswith(TRACE_SUFFIXES):
        raise GpuoptError(
            f"{path}: expected a run directory, profile.json, or a trace .json/.json.gz"
        )
    from gpuopt.trace import decode_ahead

    # decoding begins in a helper while the next lines import numpy and the analyses
    decode_ahead.start(path)
    try:
        _import_analyses()
        return _from_traces(path)
    finally:
        decode_ahead.discard()


def _import_analyses() -> None:
    """Import what the report of a trace imports on first use (the idle causes, the findings
    rules) now, while a decode helper decodes: after the decoding they would wait on the
    imports."""
    import gpuopt.findings.rules  # noqa: F401
    import gpuopt.trace.idle_causes  # noqa: F401


def _from_traces(path: Path, jobs: int | None = None, progress: Progress | None = None) -> Profile:
    from gpuopt.assemble.trace_profile import profile_from_traces
    from gpuopt.findings.engine import add_findings

    return add_findings(profile_from_traces(path, jobs, progress))


def _from_summaries(paths: list[Path]) -> Profile:
    from gpuopt.assemble.trace_profile import profile_from_summaries
    from gpuopt.findings.engine import add_findings

    return add_findings(profile_from_summaries(paths))


PROFILE_NAME = "profile.json"


def rank_profiles(out: Path, shown: str = "") -> list[tuple[str, Profile]]:
    """Each rank's run directory under ``out`` (``rank-N``; named relative to ``out``, or under
    ``shown`` when given) and its profile, in rank order; a rank whose profile cannot be read is
    left out with a one-line note on stderr."""
    ranked = sorted(
        (k, p)
        for p in out.glob("rank-*")
        if (k := _rank_of(p)) is not None and (p / PROFILE_NAME).exists()
    )
    found: list[tuple[str, Profile]] = []
    for _, d in ranked:
        try:
            name = d.name if not shown else f"{shown}/{d.name}"
            found.append((name, load_profile(d)))
        except GpuoptError as exc:
            print(f"gpuopt: {exc}", file=sys.stderr)
    return found


def _rank_of(p: Path) -> int | None:
    tail = p.name.split("-", 1)[1] if "-" in p.name else ""
    return int(tail) if tail.isdigit() and p.is_dir() else None


def job_ranks(paths: list[Path]) -> list[tuple[str, Profile]] | None:
    """The ranks of several run directories when they are the nodes of one multi-rank job
    (each holds ``rank-N`` directories; one job id and world size; no rank twice), else None."""
    found: list[tuple[str, Profile]] = []
    for path in paths:
        if not path.is_dir():
            return None
        ranks = rank_profiles(path, shown=str(path))
        if not ranks:
            return None
        found += ranks
    jobs = {(d.job_id, d.world_size) for _, p in found if (d := given(p.distributed)) is not None}
    if len(jobs) > 1:
        return None
    seen: dict[int, str] = {}
    for name, p in found:
        k = p.rank if isinstance(p.rank, int) else -1
        if k in seen:
            raise GpuoptError(f"rank {k} is in two directories: {seen[k]} and {name}")
        seen[k] = name
    return sorted(found, key=lambda rp: rp[1].rank if isinstance(rp[1].rank, int) else -1)


def _merge_job(paths: list[Path], ranks: list[tuple[str, Profile]]) -> Profile:
    """One profile of a multi-rank job from the run directories of its nodes (each node's
    ``gpuopt profile -o DIR``) and their ranks (:func:`job_ranks`): every rank merged as if they
    had shared one directory, findings evaluated. The job's exit code is the first non-zero one
    its nodes' launchers recorded."""
    from gpuopt.assemble.rank_merge import merge_ranks
    from gpuopt.findings.engine import add_findings

    codes = []
    for path in paths:
        try:
            codes.append(load_profile(path).exit_code)
        except GpuoptError as exc:
            log.debug("%s: no exit code (%s)", path, exc)
            continue  # a node whose launcher wrote no merge: its ranks still count
    code = next((c for c in codes if c), 0)
    first = ranks[0][1]
    return add_findings(merge_ranks(ranks, code, first.script, list(first.argv)))
