"""The user's files as the source fixes see them: read once, rewritten in memory, then shown as
one unified diff, run from private copies, or (``--write`` only) written back in place.

A user's source is sacred: nothing here writes a user's file except :func:`write_in_place`, which
refuses a file that changed since it was read, keeps a backup of each file, writes a temporary
file and renames it over the original (its mode kept), so a file is never left half-written.
Diff paths are ``./`` plus the path relative to the working directory: ``patch -p0`` and
``git apply`` (run from that directory) both accept them.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuopt.errors import GpuoptError
from gpuopt.optimize.codemods import CodemodError, Rewrite

BACKUP_SUFFIX = ".gpuopt-orig"


@dataclass
class SourceFile:
    """One user file: its text when read, and its text after the rewrites so far."""

    path: Path  # absolute
    shown: str  # as the diff and the report show it: relative to the working directory
    text: str
    digest: str
    new: str
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.new != self.text


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def shown_path(path: Path, cwd: Path | None = None) -> str:
    base = Path(cwd or os.getcwd()).resolve()
    try:
        return str(path.resolve().relative_to(base))
    except ValueError:
        return os.path.relpath(path.resolve(), base)


class SourceSet:
    """The files the fixes touch, each read once (so every fix sees the others' changes)."""

    def __init__(self, cwd: Path | None = None) -> None:
        self.cwd = Path(cwd or os.getcwd()).resolve()
        self.files: dict[Path, SourceFile] = {}

    def get(self, path: str | Path) -> SourceFile:
        p = (self.cwd / path).resolve()
        known = self.files.get(p)
        if known is not None:
            return known
        try:
            data = p.read_bytes()
        except OSError as exc:
            raise GpuoptError(f"{path}: cannot read: {exc.strerror or exc}") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise GpuoptError(f"{path}: not UTF-8 text; gpuopt leaves it alone") from None
        sf = SourceFile(p, shown_path(p, self.cwd), text, _digest(data), text)
        self.files[p] = sf
        return sf

    def rewrite(self, path: str | Path, codemod: Callable[[str, str], Rewrite]) -> Rewrite:
        """Run ``codemod(text, name)`` on the file's current text and keep the result."""
        sf = self.get(path)
        try:
            result = codemod(sf.new, sf.shown)
        except CodemodError as exc:
            raise GpuoptError(str(exc)) from None
        sf.new = result.source
        sf.notes.extend(f"{sf.shown}: {n}" for n in result.notes)
        return result

    def changed(self) -> list[SourceFile]:
        return [sf for sf in self.files.values() if sf.changed]


def file_diff(sf: SourceFile, text: str | None = None) -> str:
    """A unified diff of one file, from its text as read to ``text`` (default: its new text)."""
    name = f"./{sf.shown}"
    lines = difflib.unified_diff(
        sf.text.splitlines(keepends=True),
        (sf.new if text is None else text).splitlines(keepends=True),
        fromfile=name,
        tofile=name,
    )
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def unified_diff(files: list[SourceFile]) -> str:
    return "".join(file_diff(sf) for sf in sorted(files, key=lambda f: f.shown))


def write_private_copies(files: list[SourceFile], into: Path) -> dict[str, str]:
    """Each changed file's new text under ``into`` (never beside the user's file): original
    absolute path → copy path, as :mod:`gpuopt.runner.sources` takes them."""
    out: dict[str, str] = {}
    for i, sf in enumerate(sorted(files, key=lambda f: f.shown)):
        copy = into / f"{i:02d}-{sf.path.name}"
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(sf.new, encoding="utf-8")
        out[str(sf.path)] = str(copy)
    return out


def write_in_place(files: list[SourceFile]) -> list[str]:
    """``--write``: every changed file replaced by its new text, each with a backup beside it.

    All files are checked first: if any changed on disk since it was read, nothing is written.
    Returns one line per file written."""
    for sf in files:
        try:
            now = sf.path.read_bytes()
        except OSError as exc:
            raise GpuoptError(f"{sf.shown}: cannot read: {exc.strerror or exc}") from None
        if _digest(now) != sf.digest:
            raise GpuoptError(
                f"{sf.shown}: changed since gpuopt read it; nothing was written (run again)"
            )
        if not os.access(sf.path, os.W_OK):
            raise GpuoptError(f"{sf.shown}: not writable; nothing was written")
    done = []
    for sf in files:
        backup = sf.path.with_name(sf.path.name + BACKUP_SUFFIX)
        _replace(backup, sf.text.encode("utf-8"), sf.path)
        _replace(sf.path, sf.new.encode("utf-8"), sf.path)
        done.append(f"{sf.shown}: written (backup {shown_path(backup)})")
    return done


def _replace(path: Path, data: bytes, like: Path) -> None:
    """``path`` becomes ``data`` whole or not at all, with the mode of ``like``."""
    mode = stat.S_IMODE(like.stat().st_mode)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        raise GpuoptError(f"{shown_path(path)}: cannot write: {exc.strerror or exc}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
