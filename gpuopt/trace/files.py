"""Which files make up a trace, and which rank each one is.

A path is one trace file, or a folder of per-rank traces (``*.json`` / ``*.json.gz``, gpuopt's
own ``profile.json`` ignored; not recursive: subfolders holding traces are named, not read). A
file's rank is ``distributedInfo.rank``; a single file without it is rank 0. In a folder every
file must name a distinct rank: a folder mixing files with and without rank info, or two files
claiming one rank, is refused (those are different runs, and averaging them would report
numbers no run had).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuopt.debug import logger
from gpuopt.errors import GpuoptError
from gpuopt.model.summary import SUMMARY_SUFFIX  # a rank summary, not a trace

log = logger(__name__)

TRACE_SUFFIXES = (".json", ".json.gz")


def trace_files(path: Path) -> list[Path]:
    if not path.exists():
        raise GpuoptError(f"{path}: no such file or directory")
    if path.is_file():
        return [path]
    files = _traces_in(path)
    if not files:
        below = _subfolders_with_traces(path)
        hint = f"; traces in its subfolders: {_named(path, below)}" if below else ""
        raise GpuoptError(
            f"{path}: nothing to report: looked for a run directory's profile.json and for "
            f"PyTorch profiler traces (*.json, *.json.gz, not in subfolders); found neither"
            f"{_runs_below(path) or hint}"
        )
    return files


def _traces_in(folder: Path) -> list[Path]:
    """The trace files directly in ``folder`` (not a run's profile.json, not a summary)."""
    try:
        return sorted(
            p
            for p in folder.iterdir()
            if p.is_file()
            and p.name.endswith(TRACE_SUFFIXES)
            and p.name != "profile.json"
            and not p.name.endswith(SUMMARY_SUFFIX)
            and not p.name.startswith(".")
        )
    except OSError as exc:
        log.debug("%s not listed: %s", folder, exc)
        return []


def _subfolders_with_traces(path: Path) -> list[Path]:
    """The subfolders of ``path`` (one level down) that hold trace files themselves."""
    try:
        subs = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError as exc:
        log.debug("%s not listed: %s", path, exc)
        return []
    return [d for d in subs if _traces_in(d)]


def _named(path: Path, folders: list[Path]) -> str:
    named = ", ".join(str(path / d.name) for d in folders[:3])
    return named + (" ..." if len(folders) > 3 else "")


def subfolder_note(path: Path) -> str | None:
    """A note when a folder of traces also has subfolders of traces, which are not read (a
    folder is one job's per-rank traces: another folder is another run or job)."""
    if not path.is_dir():
        return None
    below = _subfolders_with_traces(path)
    if not below:
        return None
    n = sum(len(_traces_in(d)) for d in below)
    return (
        f"{n} trace file{'s' if n > 1 else ''} in subfolders not read (a folder is one job's "
        f"per-rank traces; report a subfolder on its own): {_named(path, below)}"
    )


def _runs_below(path: Path) -> str:
    """A hint when ``path`` holds run directories (``gpuopt report gpuopt-runs``)."""
    try:
        runs = sorted(p.parent.name for p in path.glob("*/profile.json"))
    except OSError as exc:
        log.debug("%s not listed: %s", path, exc)
        return ""
    if not runs:
        return ""
    named = ", ".join(str(path / r) for r in runs[-3:])
    return f"; run directories below it: {named}" + (" ..." if len(runs) > 3 else "")


def rank_of(meta: dict[str, Any]) -> int | None:
    info = meta.get("distributedInfo")
    if isinstance(info, dict):
        r = info.get("rank")
        if isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 1 << 31:
            return r
    return None


def check_ranks(
    path: Path, files: list[str], ranks: list[int | None], what: str = "traces"
) -> list[int]:
    """Each file's rank (``ranks``: what each file says, None for nothing), or a one-line
    :class:`GpuoptError` when the files are not one job's ranks, one each."""
    if len(files) == 1:
        return [ranks[0] if ranks[0] is not None else 0]
    missing = [f for f, r in zip(files, ranks, strict=True) if r is None]
    if missing and len(missing) < len(files):
        raise GpuoptError(
            f"{path}: mixed ranks: {len(missing)} of {len(files)} {what} have no "
            f"distributedInfo.rank (e.g. {missing[0]}); put one job's per-rank traces in a folder"
        )
    if missing:
        raise GpuoptError(
            f"{path}: {len(files)} {what} without rank info (distributedInfo.rank); "
            "they look like separate runs: report one file at a time"
        )
    seen: dict[int, str] = {}
    for f, r in zip(files, ranks, strict=True):
        assert r is not None
        if r in seen:
            raise GpuoptError(
                f"{path}: mixed ranks: {seen[r]} and {f} both claim rank {r}; "
                f"keep one job's {what} per folder"
            )
        seen[r] = f
    return [r for r in ranks if r is not None]
