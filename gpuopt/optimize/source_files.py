"""The user's files as the source fixes see them: read once, rewritten in memory, then shown as
one unified diff, run from private copies, or (``--write`` only) written back in place.

A user's source is sacred: nothing here writes a user's file except :func:`write_in_place`, which
refuses a file that changed since it was read (checked again right before each file is
replaced), or that its mode bits make read-only (whoever runs gpuopt, root included); keeps a
backup of each file under a name no file has (``X.gpuopt-orig``, else ``X.gpuopt-orig.2``, ...:
a backup never replaces a file); writes a temporary file and renames it over the original (its
mode and owner kept), so a file is never left half-written; and keeps a UTF-8 byte-order mark.

Each file is read once per :class:`SourceSet`, and a command that builds several (one per run,
one for the diff) shares their reads (``reads``): the text planned, the text measured in the
runs and the text written are one text, the file's bytes when gpuopt first read it.

Diff paths are ``./`` plus the path relative to the working directory, written as git writes
them (:func:`diff_name`): ``patch -p0`` and ``git apply`` (run from that directory) both accept
them, spaces and quotes in names included.
"""

from __future__ import annotations

import codecs
import difflib
import hashlib
import os
import stat
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuopt.atomic_write import write_atomic
from gpuopt.debug import logger
from gpuopt.errors import GpuoptError
from gpuopt.optimize.codemods import CodemodError, Rewrite
from gpuopt.paths import read_only, reason

log = logger(__name__)

BACKUP_SUFFIX = ".gpuopt-orig"
_BOM = codecs.BOM_UTF8


@dataclass
class SourceFile:
    """One user file: its text when read, and its text after the rewrites so far (both without
    a UTF-8 byte-order mark, which libcst does not keep; ``bom`` holds it for the bytes)."""

    path: Path  # absolute
    shown: str  # as the diff and the report show it: relative to the working directory
    text: str
    digest: str
    new: str
    notes: list[str] = field(default_factory=list)
    raw: bytes = b""  # the file's bytes when read: the backup, and what the disk must still hold
    bom: bytes = b""

    @property
    def changed(self) -> bool:
        return self.new != self.text

    def new_bytes(self) -> bytes:
        """The bytes to write (and to run from a private copy): the new text, its mark kept."""
        return self.bom + self.new.encode("utf-8")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def shown_path(path: Path, cwd: Path | None = None) -> str:
    base = Path(cwd or os.getcwd()).resolve()
    try:
        return str(path.resolve().relative_to(base))
    except ValueError:  # outside base: shown relative with ..
        return os.path.relpath(path.resolve(), base)


class SourceSet:
    """The files the fixes touch, each read once (so every fix sees the others' changes)."""

    def __init__(self, cwd: Path | None = None, reads: dict[Path, bytes] | None = None) -> None:
        self.cwd = Path(cwd or os.getcwd()).resolve()
        self.files: dict[Path, SourceFile] = {}
        self.reads = reads if reads is not None else {}  # shared: a file is read once

    def get(self, path: str | Path) -> SourceFile:
        p = (self.cwd / path).resolve()
        known = self.files.get(p)
        if known is not None:
            return known
        data = self.reads.get(p)
        if data is None:
            try:
                data = p.read_bytes()
            except OSError as exc:
                raise GpuoptError(f"{path}: cannot read: {exc.strerror or exc}") from None
            self.reads[p] = data
        bom = _BOM if data.startswith(_BOM) else b""
        try:
            text = data[len(bom) :].decode("utf-8")
        except UnicodeDecodeError:
            raise GpuoptError(f"{path}: not UTF-8 text; gpuopt leaves it alone") from None
        sf = SourceFile(p, shown_path(p, self.cwd), text, _digest(data), text, raw=data, bom=bom)
        self.files[p] = sf
        return sf

    def rewrite(self, path: str | Path, codemod: Callable[[str, str], Rewrite]) -> Rewrite:
        """Run ``codemod(text, name)`` on the file's current text and keep the result."""
        sf = self.get(path)
        try:
            result = codemod(sf.new, sf.shown)
        except CodemodError as exc:
            raise GpuoptError(str(exc)) from None
        if result.source != sf.new:
            _check_compiles(result.source, sf.shown)
        sf.new = result.source
        sf.notes.extend(f"{sf.shown}: {n}" for n in result.notes)
        return result

    def changed(self) -> list[SourceFile]:
        return [sf for sf in self.files.values() if sf.changed]


def _check_compiles(source: str, shown: str) -> None:
    """A rewrite is compiled (not run) before anything uses it: one that Python would refuse
    (``def f(step, step)``) is an error naming its line, and the file stays as it was."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the user's own escapes are not the rewrite's
            compile(source, shown, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        where = f" at line {line}" if line else ""
        msg = getattr(exc, "msg", None) or str(exc)
        raise GpuoptError(
            f"{shown}: the rewrite does not compile{where}: {msg}; the file is left as it was"
        ) from None


def diff_name(shown: str) -> str:
    """A file's name in a diff header as git writes it, so that ``patch -p0`` and ``git apply``
    both read it back: C-quoted when it holds a quote, a backslash, a control character or a
    byte beyond ASCII; else as is, with a tab after the name when it holds a space (the tab
    ends the name; a space alone ended it for GNU patch: 'my dir/fix me.py' failed)."""
    name = f"./{shown}"
    raw = os.fsencode(name)
    if any(b < 0x20 or b >= 0x7F or b in b'"\\' for b in raw):
        return '"' + "".join(_quoted_byte(b) for b in raw) + '"'
    return name + "\t" if " " in name else name


_C_ESCAPES = {
    0x07: "\\a",
    0x08: "\\b",
    0x09: "\\t",
    0x0A: "\\n",
    0x0B: "\\v",
    0x0C: "\\f",
    0x0D: "\\r",
    0x22: '\\"',
    0x5C: "\\\\",
}


def _quoted_byte(b: int) -> str:
    if b in _C_ESCAPES:
        return _C_ESCAPES[b]
    if b < 0x20 or b >= 0x7F:
        return f"\\{b:03o}"
    return chr(b)


def file_diff(sf: SourceFile, text: str | None = None) -> str:
    """A unified diff of one file, from its text as read to ``text`` (default: its new text)."""
    name = diff_name(sf.shown)
    mark = sf.bom.decode("utf-8")  # in the first line, where patch finds it in the file
    lines = difflib.unified_diff(
        (mark + sf.text).splitlines(keepends=True),
        (mark + (sf.new if text is None else text)).splitlines(keepends=True),
        fromfile=name,
        tofile=name,
        lineterm="\n",
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
        copy.write_bytes(sf.new_bytes())
        out[str(sf.path)] = str(copy)
    return out


def write_in_place(files: list[SourceFile]) -> list[str]:
    """``--write``: every changed file replaced by its new text, each with a backup beside it.

    All files are checked first (unchanged since read, writable by their mode bits and by this
    user, in a directory that takes the temporary file and the backup): if any fails, nothing
    is written. Each file is checked again right before it is replaced. Returns one line per
    file written."""
    check_writable(files)
    done: list[str] = []
    for sf in files:
        backup = _backup(sf)
        try:
            _unchanged(sf)  # again, now: another process may have written it meanwhile
        except GpuoptError as exc:
            _remove_quietly(backup)
            raise GpuoptError(f"{exc}{_so_far(done)}") from None
        st = sf.path.stat()
        try:
            write_atomic(
                sf.path, sf.new_bytes(), keep=(stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
            )
        except OSError as exc:
            raise GpuoptError(f"{sf.shown}: cannot write: {reason(exc)}{_so_far(done)}") from None
        done.append(f"{sf.shown}: written (backup {Path(sf.shown).with_name(backup.name)})")
    return done


def changed_on_disk(files: list[SourceFile]) -> list[str]:
    """The files whose bytes on disk are no longer those gpuopt read (and planned, measured and
    diffed from)."""
    out = []
    for sf in files:
        try:
            _unchanged(sf)
        except GpuoptError:
            out.append(sf.shown)
    return out


def check_writable(files: list[SourceFile]) -> None:
    """Refuse (one line) unless every file can be written in place: unchanged since read,
    writable by its mode bits and by this user, in a directory that takes the backup."""
    for sf in files:
        _unchanged(sf)
        try:
            read_only(sf.path, sf.path.stat(), sf.shown)
        except GpuoptError as exc:
            raise GpuoptError(f"{exc}; nothing was written") from None
        if not os.access(sf.path.parent, os.W_OK | os.X_OK):
            raise GpuoptError(
                f"{sf.shown}: its directory is not writable (the backup and the new text go "
                "there); nothing was written"
            )


def _unchanged(sf: SourceFile) -> None:
    try:
        now = sf.path.read_bytes()
    except OSError as exc:
        raise GpuoptError(f"{sf.shown}: cannot read: {reason(exc)}; not written") from None
    if now != sf.raw:
        raise GpuoptError(
            f"{sf.shown}: changed since gpuopt read it (the fixes were planned and measured on "
            "the text it read); not written: run gpuopt optimize again"
        )


def _backup(sf: SourceFile) -> Path:
    """The file's bytes as read, under the first free name of ``X.gpuopt-orig``,
    ``X.gpuopt-orig.2``, ...: made whole, never over an existing file (a user's own, or the
    backup of an earlier --write)."""
    base = sf.path.with_name(sf.path.name + BACKUP_SUFFIX)
    st = sf.path.stat()
    keep = (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)  # a private file stays private
    for n in range(1, 1000):
        backup = base if n == 1 else base.with_name(f"{base.name}.{n}")
        try:
            write_atomic(backup, sf.raw, replace=False, keep=keep)
            return backup
        except FileExistsError:  # that backup name is taken: the next
            continue
        except OSError as exc:
            raise GpuoptError(
                f"{shown_path(backup)}: cannot write the backup: {reason(exc)}; nothing was written"
            ) from None
    raise GpuoptError(f"{shown_path(base)}: 999 backups there already; nothing was written")


def _remove_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError as exc:
        log.debug("%s not removed: %s", path, exc)


def _so_far(done: list[str]) -> str:
    if not done:
        return ""
    return " (before it: " + "; ".join(done) + ")"
