"""``gpuopt.load(path)``: one reader for every input gpuopt accepts, giving a typed Profile.

* a run directory, or a ``profile.json`` (any file whose first bytes name the schema): decoded
  and validated (:func:`gpuopt.model.document.load_profile`);
* a PyTorch profiler (Kineto) trace, ``.json`` or ``.json.gz``, or a folder of per-rank traces:
  analysed into a profile (:mod:`gpuopt.trace` measures, the assembly builds the document); a
  folder's ranks in worker processes;
* rank summaries (``gpuopt.summary/1``, ``gpuopt report --summary-only``): files, folders of
  them, several at once: merged into the job's profile (:func:`load_paths`).

Bad input of any kind is a one-line :class:`~gpuopt.errors.GpuoptError`; nothing is executed or
unpickled.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gpuopt.errors import GpuoptError
from gpuopt.model.document import load_profile
from gpuopt.model.profile import Profile

TRACE_SUFFIXES = (".json.gz", ".json")
SUMMARY_SUFFIX = ".summary.json"
Progress = Callable[[int, int], None]


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
    from gpuopt.model.summary import looks_like_summary

    try:
        with path.open("rb") as fh:
            return looks_like_summary(fh.read(256))
    except OSError as exc:
        raise GpuoptError(f"{path}: cannot read: {exc.strerror or exc}") from None


def load_paths(
    paths: list[Path], jobs: int | None = None, progress: Progress | None = None
) -> Profile:
    """One path as :func:`load`; several: rank summaries (files or folders of them) of one job,
    merged. ``jobs``: worker processes for a folder of traces (None: one per core)."""
    for p in paths:
        if not p.exists():
            raise GpuoptError(f"{p}: no such file or directory")
    if len(paths) == 1:
        return load(paths[0], jobs, progress)
    odd = [p for p in paths if not is_summary(p)]
    if odd:
        raise GpuoptError(
            f"{odd[0]}: not rank summaries; several paths are merged only as rank summaries "
            f"(*{SUMMARY_SUFFIX}: gpuopt report DIR --summary-only -o OUT); for traces, put one "
            "job's per-rank traces in one folder"
        )
    return _from_summaries(paths)


def load(path: Path | str, jobs: int | None = None, progress: Progress | None = None) -> Profile:
    """The profile of a run directory, a ``profile.json``, a trace file, a folder of traces, a
    rank summary or a folder of them."""
    path = Path(path)
    if not path.exists():
        raise GpuoptError(f"{path}: no such file or directory")
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
        return _from_traces(path)
    finally:
        decode_ahead.discard()


def _from_traces(path: Path, jobs: int | None = None, progress: Progress | None = None) -> Profile:
    from gpuopt.assemble.trace_profile import profile_from_traces
    from gpuopt.findings.engine import add_findings

    return add_findings(profile_from_traces(path, jobs, progress))


def _from_summaries(paths: list[Path]) -> Profile:
    from gpuopt.assemble.trace_profile import profile_from_summaries
    from gpuopt.findings.engine import add_findings

    return add_findings(profile_from_summaries(paths))
