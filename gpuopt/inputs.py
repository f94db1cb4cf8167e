"""A command's inputs, by what they resolve to: the files no output of the command may be.

An output is one of the inputs when it resolves to one: the same path by any spelling, a
symbolic link to it (:func:`os.path.realpath`), or a hard link (the same device and inode,
:func:`os.stat`). An input directory counts with the files reading it reads (:func:`files_read`):
a run directory's ``profile.json`` (its ranks' too), an optimize directory's ``optimize.json``,
a folder of traces' ``*.json`` / ``*.json.gz`` (not in subfolders).

A command names its inputs (:func:`declare`; :func:`gpuopt.paths.check_output` does, before the
work) and every regular file gpuopt writes is checked against them once more right before it is
written (:func:`gpuopt.atomic_write.write_atomic`): an output that became a link to an input
while the command worked is refused too.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from gpuopt.debug import logger
from gpuopt.errors import GpuoptError

log = logger(__name__)

_TRACE_SUFFIXES = (".json", ".json.gz")
PROFILE_NAME = "profile.json"
OPTIMIZE_NAME = "optimize.json"

_declared: list[Path] = []  # the inputs of the command running, as given


def declare(paths: Iterable[Path]) -> None:
    """Add ``paths`` to the inputs of the command running."""
    for p in paths:
        if p not in _declared:
            _declared.append(p)


def clear() -> None:
    """A new command starts: no inputs yet."""
    _declared.clear()


def declared() -> list[Path]:
    return list(_declared)


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except (OSError, ValueError):  # missing, a loop of links, a NUL byte: no file to clash with
        return None


def _real(path: Path) -> Path | None:
    try:
        return Path(os.path.realpath(path))
    except (OSError, ValueError) as exc:
        log.debug("%s not resolved: %s", path, exc)
        return None


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def files_read(directory: Path) -> list[Path]:
    """The files that reading ``directory`` as an input reads (what gpuopt.loading and the
    optimize report open in it)."""
    try:
        if (directory / PROFILE_NAME).exists():
            return [directory / PROFILE_NAME, *sorted(directory.glob(f"rank-*/{PROFILE_NAME}"))]
        if (directory / OPTIMIZE_NAME).exists():
            return [directory / OPTIMIZE_NAME]
        return sorted(
            p for p in directory.iterdir() if p.name.endswith(_TRACE_SUFFIXES) and p.is_file()
        )
    except OSError as exc:
        log.debug("%s not listed: %s", directory, exc)
        return []


def _read_by_name(directory: Path, real: Path) -> bool:
    """Whether ``real`` (an existing file, resolved) is read when ``directory`` is: a
    ``profile.json`` anywhere in a run or optimize directory, its ``optimize.json``, a trace at
    the top of a folder of traces."""
    base = _real(directory)
    if base is None or base not in real.parents:
        return False
    if (directory / PROFILE_NAME).exists():
        return real.name == PROFILE_NAME
    if (directory / OPTIMIZE_NAME).exists():
        return real.name in (OPTIMIZE_NAME, PROFILE_NAME)
    return real.parent == base and real.name.endswith(_TRACE_SUFFIXES)


def clash(output: Path, inputs: Iterable[Path] | None = None) -> Path | None:
    """The input (or the file read in an input directory) that ``output`` would write over,
    else None. ``inputs``: default, the declared ones. A path that does not exist yet clashes
    with nothing: no input is read there."""
    st = _stat(output)
    if st is None or not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        return None  # nothing there yet, or a device or a FIFO (written into, never renamed over)
    real = _real(output)
    for path in list(inputs) if inputs is not None else declared():
        src = _stat(path)
        if src is None:
            continue
        if _same(st, src):
            return path
        if not stat.S_ISDIR(src.st_mode) or not stat.S_ISREG(st.st_mode):
            continue
        if real is not None and _read_by_name(path, real):
            return path / os.path.relpath(real, os.path.realpath(path))  # the file, in ``path``
        hit = next((f for f in files_read(path) if (fs := _stat(f)) and _same(st, fs)), None)
        if hit is not None:
            return hit
    return None


def refuse(output: Path, inputs: Iterable[Path] | None = None, option: str = "") -> None:
    """A one-line :class:`GpuoptError` when ``output`` is one of the inputs (:func:`clash`)."""
    hit = clash(output, inputs)
    if hit is None:
        return
    named = _named(hit, list(inputs) if inputs is not None else declared())
    where = f", read in {_shown(named)}" if named != hit else ""
    how = _how(output, hit)
    give = f"give another {option}" if option else "not written over it"
    raise GpuoptError(
        f"{_shown(output)}: is an input of this command ({_shown(hit)}{where}{how}); {give}"
    )


def _named(hit: Path, given: list[Path]) -> Path:
    """The input as given that holds ``hit`` (``hit`` itself when given)."""
    if hit in given:
        return hit
    return next((p for p in given if p in hit.parents), hit)


def _how(output: Path, hit: Path) -> str:
    """How the output reaches the input, when it is not plainly the same path."""
    if os.path.islink(output):
        return ", through a symbolic link"
    real, target = _real(output), _real(hit)
    if real is not None and target is not None and real != target:
        return ", as a hard link" if not os.path.isdir(hit) else ""
    return ""


def _shown(path: Path | str) -> str:
    text = str(path)
    return text if len(text) <= 120 else f"{text[:60]}...{text[-40:]}"
