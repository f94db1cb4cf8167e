"""The user's files as the source fixes see them: read once, rewritten in memory, then shown as
one unified diff, run from private copies, or (``--write`` only) written back in place.

A user's source is sacred: nothing here writes a user's file except :func:`write_in_place`, which
refuses a file whose content changed since it was read (checked once its temporary is written and
again right before the rename), or that its mode bits or its directory's make read-only
(whoever runs gpuopt, root included); keeps a backup of each file under a name no file has
(``X.gpuopt-orig``, else ``X.gpuopt-orig.2``, ...: a backup never replaces a file); writes a
temporary file and renames it over the original (its mode and owner kept), so a file is never
left half-written, with SIGINT and SIGTERM held meanwhile (a signal leaves it as it was or as
rewritten); and keeps a UTF-8 byte-order mark.

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
from gpuopt.paths import read_only, reason
from gpuopt.script import interrupts
from gpuopt.source import CodemodError, Rewrite

log = logger(__name__)

BACKUP_SUFFIX = ".gpuopt-orig"
MAX_BACKUPS = 999  # X.gpuopt-orig, X.gpuopt-orig.2, ... X.gpuopt-orig.999
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
    absolute path → copy path, as :mod:`gpuopt.script.sources` takes them."""
    out: dict[str, str] = {}
    for i, sf in enumerate(sorted(files, key=lambda f: f.shown)):
        copy = into / f"{i:02d}-{sf.path.name}"
        write_atomic(copy, sf.new_bytes())  # a link left there is replaced, never written through
        out[str(sf.path)] = str(copy)
    return out


def write_in_place(files: list[SourceFile], each: Callable[[str], None] | None = None) -> list[str]:
    """``--write``: every changed file replaced by its new text, each with a backup beside it.

    All files are checked first (:func:`check_writable`): if any fails, nothing is written.
    Each file is then replaced whole (:func:`_replace`), with SIGINT and SIGTERM held until the
    last one is done: a signal never leaves a file between its two texts, nor a backup beside a
    file not rewritten. Returns one line per file written, each also given to ``each`` as soon
    as it is written (said before a signal held meanwhile ends the process)."""
    check_writable(files)
    done: list[str] = []
    with interrupts.deferred():
        for sf in files:
            try:
                backup = _replace(sf)
            except GpuoptError as exc:
                raise GpuoptError(f"{exc}{_so_far(done)}") from None
            done.append(f"{sf.shown}: written (backup {Path(sf.shown).with_name(backup.name)})")
            if each is not None:
                each(done[-1])
    return done


def _replace(sf: SourceFile) -> Path:
    """One file replaced by its new text; its backup's path. The new text goes to a temporary
    file beside it; then the file is checked (its content, against what gpuopt read), its
    backup made, the file checked again, and only then renamed over: an edit up to that moment
    is refused and kept, and the backup taken back."""
    made: list[Path] = []

    def ready() -> None:
        _unchanged(sf)  # the temporary is whole: has the file moved meanwhile?
        made.append(_backup(sf))
        _unchanged(sf)  # again, right before the rename

    try:
        st = sf.path.stat()
        keep = (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
        write_atomic(sf.path, sf.new_bytes(), keep=keep, over_input=True, before_replace=ready)
    except OSError as exc:
        _remove_all(made)
        raise GpuoptError(f"{sf.shown}: cannot write: {reason(exc)}") from None
    except BaseException:
        _remove_all(made)
        raise
    return made[0]


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
    """Refuse (one line) unless every file can be written in place: unchanged since read, and
    :func:`check_replaceable` passes."""
    for sf in files:
        _unchanged(sf)
        check_replaceable(sf.path, sf.shown)


def check_replaceable(path: Path, shown: str) -> None:
    """Refuse (one line) a file ``--write`` could not replace: read-only by its mode bits or for
    this user, in a directory that its mode bits or this user cannot write (the backup and the
    temporary go there; root included, as for the file: a directory made read-only says not
    to), or with every backup name taken. Checked before any run, for the script, and once the
    fixes are planned, for every file they change."""
    real = Path(os.path.realpath(path))
    try:
        read_only(real, real.stat(), shown)
        folder = real.parent.stat()
    except GpuoptError as exc:
        raise GpuoptError(f"{exc}; nothing was written") from None
    except OSError as exc:
        raise GpuoptError(f"{shown}: cannot read: {reason(exc)}; nothing was written") from None
    if not folder.st_mode & 0o222 or not os.access(real.parent, os.W_OK | os.X_OK):
        raise GpuoptError(
            f"{shown}: its directory is not writable (mode {stat.S_IMODE(folder.st_mode):04o}; "
            "the backup and the new text go there); nothing was written"
        )
    if _free_backup(real) is None:
        raise GpuoptError(
            f"{shown_path(_backup_name(real, 1))}: {MAX_BACKUPS} backups there already; remove "
            "some; nothing was written"
        )


def _unchanged(sf: SourceFile) -> None:
    """Refuse a file whose content (its hash) is no longer the one gpuopt read."""
    try:
        now = sf.path.read_bytes()
    except OSError as exc:
        raise GpuoptError(
            f"{sf.shown}: cannot read it any more ({reason(exc)}): changed while optimize ran; "
            "not written"
        ) from None
    if _digest(now) != sf.digest:
        raise GpuoptError(
            f"{sf.shown}: changed while optimize ran, since gpuopt read it (the fixes were "
            "planned and measured on the text it read); not written: run gpuopt optimize again"
        )


def _backup_name(path: Path, n: int) -> Path:
    base = path.with_name(path.name + BACKUP_SUFFIX)
    return base if n == 1 else base.with_name(f"{base.name}.{n}")


def _free_backup(path: Path) -> Path | None:
    """The first backup name no file has (None: all taken)."""
    return next(
        (b for n in range(1, MAX_BACKUPS + 1) if not os.path.lexists(b := _backup_name(path, n))),
        None,
    )


def _backup(sf: SourceFile) -> Path:
    """The file's bytes as read, under the first free name of ``X.gpuopt-orig``,
    ``X.gpuopt-orig.2``, ...: made whole, never over an existing file (a user's own, or the
    backup of an earlier --write)."""
    st = sf.path.stat()
    keep = (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)  # a private file stays private
    for n in range(1, MAX_BACKUPS + 1):
        backup = _backup_name(sf.path, n)
        try:
            write_atomic(backup, sf.raw, replace=False, keep=keep)
            return backup
        except FileExistsError:  # that backup name is taken: the next
            continue
        except OSError as exc:
            raise GpuoptError(
                f"{shown_path(backup)}: cannot write the backup: {reason(exc)}; nothing was written"
            ) from None
    raise GpuoptError(
        f"{shown_path(_backup_name(sf.path, 1))}: {MAX_BACKUPS} backups there already; remove "
        "some; nothing was written"
    )


def _remove_all(paths: list[Path]) -> None:
    for p in paths:
        _remove_quietly(p)


def _remove_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError as exc:
        log.debug("%s not removed: %s", path, exc)


def _so_far(done: list[str]) -> str:
    if not done:
        return ""
    return " (before it: " + "; ".join(done) + ")"
