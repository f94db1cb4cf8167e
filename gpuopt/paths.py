"""How gpuopt treats a path it is given: the one place every command's inputs and outputs go
through (docs/reliability.md).

* An **input** is a regular file or a directory. A FIFO, a device or a socket is refused in one
  line before anything reads it: reading one can block forever (a FIFO nobody writes) or never
  end (``/dev/zero``).
* An **output** is checked before the command does its work (:func:`check_output`): not empty
  (``''`` would be the working directory), not a directory, not too long for the file system,
  not read-only, and never one of the command's own inputs by what both resolve to (the same
  file by any spelling, a symbolic or a hard link) nor a file the command reads inside an input
  directory (its ``profile.json``, a trace): :mod:`gpuopt.inputs`, which every write checks
  again.
* It is then written by :func:`write_output`, which decides by what the path is *now*: a
  regular file, or a path that does not exist yet, is written whole or not at all (a temporary
  file in the same directory, then a rename; an existing file keeps its mode and owner, and a
  symbolic link stays a link, its target replaced). Anything else that can be written (a
  character device such as ``/dev/null``, a FIFO, ``/dev/stdout``, ``/dev/fd/N``) gets a plain
  write: renaming over it would replace the device with a regular file.
* A command's **default folder** (no ``-o``) is ``gpuopt-runs/<name>-<YYYYmmdd-HHMMSS>``, made by
  :func:`default_run_dir` alone, exclusively: two runs started in the same second get one each
  (``-2``, ``-3`` ...).
"""

from __future__ import annotations

import datetime as _dt
import errno
import os
import stat
import sys
from collections.abc import Iterable
from pathlib import Path

from gpuopt import inputs
from gpuopt.atomic_write import write_atomic
from gpuopt.debug import logger
from gpuopt.errors import GpuoptError

log = logger(__name__)

# Paths that name an open file or a device however they resolve: never renamed over.
_PLAIN_ROOTS = ("/dev/", "/proc/")


RUNS_ROOT = Path("gpuopt-runs")  # where a command writes when not given -o
# the GPU profiler window's trace in a run directory (gpuopt.probes.profiler_window writes it)
WINDOW_TRACE_NAME = "profiler-window.pt.trace.json.gz"


def default_run_dir(name: str, now: _dt.datetime | None = None) -> Path:
    """``gpuopt-runs/<name>-<YYYYmmdd-HHMMSS>``, with ``-2``, ``-3`` ... if that one exists;
    created here, exclusively, so two commands started in the same second get a folder each
    (``name``: the script's stem, and the command's when not ``profile``: ``train-optimize``)."""
    now = now or _dt.datetime.now()
    base = RUNS_ROOT / f"{name}-{now:%Y%m%d-%H%M%S}"
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GpuoptError(f"{base.parent}: cannot create run directory: {reason(exc)}") from None
    out, n = base, 1
    while True:
        try:
            out.mkdir()
            return out
        except FileExistsError:
            n += 1
            out = base.with_name(f"{base.name}-{n}")
        except OSError as exc:
            raise GpuoptError(f"{out}: cannot create run directory: {reason(exc)}") from None


def reason(exc: OSError) -> str:
    """An OS error as one short phrase ("No space left on device")."""
    return exc.strerror or str(exc)


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def stat_or_none(path: Path, follow: bool = True) -> os.stat_result | None:
    """``os.stat`` of ``path``; None when nothing is there. Any other OS error (a name too long,
    no permission on a parent, a loop of links) is a one-line GpuoptError."""
    try:
        return os.stat(path, follow_symlinks=follow)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise GpuoptError(f"{_shown(path)}: {reason(exc)}") from None
    except ValueError as exc:  # an embedded NUL byte
        raise GpuoptError(f"{_shown(path)}: not a usable path ({exc})") from None


def _shown(path: Path | str) -> str:
    """A path in a message: as given, cut in the middle when it is very long."""
    text = str(path)
    return text if len(text) <= 120 else f"{text[:60]}...{text[-40:]}"


def regular_input(path: Path, what: str = "") -> None:
    """Refuse an input that exists but is neither a regular file nor a directory (``what``: the
    option that named it, for the message). A missing path is left to the caller's message."""
    st = stat_or_none(path)
    if st is None or stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return
    named = f"{what} " if what else ""
    raise GpuoptError(
        f"{named}{_shown(path)}: is {kind_of(st.st_mode)}, not a file gpuopt can read; "
        "save it to a file first"
    )


def nonempty(value: str, option: str) -> Path:
    """A path option's value, refused when empty (``Path('')`` is the working directory)."""
    if not value:
        raise GpuoptError(f"{option} '': an empty path; name a file or directory")
    return Path(value)


def check_output(output: Path, reads: Iterable[Path], option: str = "-o") -> None:
    """Refuse, before any work, an output path that cannot be written or would write over what
    the command reads (``reads``: its inputs, files or directories). One line each."""
    text = str(output)
    if not text or text == ".":
        raise GpuoptError(f"{option} '{text}': name a file to write, e.g. {option} report.html")
    if text == "-":
        raise GpuoptError(f"{option} -: stdout is not taken here; name a file to write")
    _check_name_lengths(output, option)
    st = stat_or_none(output)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise GpuoptError(f"{_shown(output)}: is a directory; {option} takes a file")
    parent = stat_or_none(output.parent) if str(output.parent) else None
    if parent is not None and not stat.S_ISDIR(parent.st_mode):
        raise GpuoptError(
            f"{_shown(output)}: cannot write: {_shown(output.parent)} is not a directory"
        )
    if st is not None and stat.S_ISREG(st.st_mode):
        read_only(output, st)
    refuse_inputs(output, reads, option)


def refuse_inputs(output: Path, reads: Iterable[Path], option: str = "-o") -> None:
    """Refuse an output that is one of ``reads`` (or a file they hold that is read), by what
    both resolve to (:mod:`gpuopt.inputs`); ``reads`` become the command's declared inputs,
    which every write checks again."""
    reads = list(reads)
    inputs.declare(reads)
    inputs.refuse(output, reads, option)


def read_only(path: Path, st: os.stat_result, shown: str = "") -> None:
    """Refuse a regular file its mode bits keep from being written, whoever runs gpuopt (root
    may write anything; a file made read-only says not to), or this user may not write."""
    if not st.st_mode & 0o222 or not os.access(path, os.W_OK):
        raise GpuoptError(
            f"{shown or _shown(path)}: is read-only (mode {stat.S_IMODE(st.st_mode):04o}); "
            "gpuopt does not write over it"
        )


def _check_name_lengths(output: Path, option: str) -> None:
    """A name longer than the file system allows is refused now, not after the work."""
    try:
        limit = os.pathconf(_existing_parent(output), "PC_NAME_MAX")
    except (OSError, ValueError) as exc:
        log.debug("PC_NAME_MAX not read for %s (%s): 255 assumed", output, exc)
        limit = 255
    long = next((p for p in output.parts if len(os.fsencode(p)) > limit), None)
    if long is not None:
        raise GpuoptError(
            f"{option} {_shown(output)}: a name of {len(os.fsencode(long))} bytes; this file "
            f"system allows {limit}"
        )


def _existing_parent(path: Path) -> str:
    for p in [path.parent, *path.parent.parents]:
        if os.path.isdir(p):
            return str(p)
    return "."


def plain(path: Path, st: os.stat_result | None) -> bool:
    """Whether ``path`` gets a plain write: it exists and is not a regular file (a device, a
    FIFO, a socket), or it names an open file or a device (``/dev/...``, ``/proc/...``)."""
    if st is not None and not stat.S_ISREG(st.st_mode):
        return True
    return os.path.abspath(path).startswith(_PLAIN_ROOTS)


def printable(text: str) -> str:
    """``text`` with each byte a path could not decode (a file name that is not UTF-8, which
    Python holds as a lone surrogate) written as its escape, ``\\xff``: valid UTF-8 always."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate that is no escaped byte
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def utf8(text: str) -> bytes:
    """Text as UTF-8 for an output file (:func:`printable`)."""
    return printable(text).encode("utf-8")


def write_output(path: Path, data: bytes, failure: str = "cannot write") -> None:
    """Write ``data`` to ``path`` as its kind asks (see the module's doc); a failure is one line:
    ``PATH: <failure>: <reason>``."""
    st = stat_or_none(path)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise GpuoptError(f"{_shown(path)}: is a directory; {failure}")
    try:
        if plain(path, st):
            _write_plain(path, data)
        else:
            write_regular(path, data, st)
    except OSError as exc:
        raise GpuoptError(f"{_shown(path)}: {failure}: {reason(exc)}") from None


def write_regular(path: Path, data: bytes, st: os.stat_result | None) -> None:
    """A regular file (or a new one), whole or not at all; a symbolic link stays a link (its
    target is written), an existing file keeps its mode and, where this process may, its
    owner."""
    real = Path(os.path.realpath(path))
    keep = None if st is None else (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
    write_atomic(real, data, keep=keep)


def _write_plain(path: Path, data: bytes) -> None:
    """Open what is there and write, as a shell's ``>`` does, with no temporary file and no
    rename; nothing is created (a missing ``/dev/...`` name is an error, not a new file). A
    regular file reached through ``/dev/stdout`` or ``/proc/self/fd/N`` is appended to. A FIFO
    nobody reads yet is waited for, and the wait said on stderr."""
    flags = os.O_WRONLY
    if os.path.isfile(path):
        flags |= os.O_APPEND
    try:
        fd = os.open(path, flags | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno != errno.ENXIO:  # ENXIO: a FIFO with no reader yet
            raise
        print(f"gpuopt: {_shown(path)}: waiting for a reader of this FIFO", file=sys.stderr)
        fd = os.open(path, flags)
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def write_stdout(text: str) -> None:
    """``text`` on stdout, flushed. Stdout closed (``>&-``) or failing (``> /dev/full``) is a
    one-line GpuoptError (what is still buffered discarded, so that it does not fail again at
    exit); a reader that went away (``| head``) raises BrokenPipeError for the caller."""
    out = sys.stdout
    if out is None or out.closed:
        raise GpuoptError("cannot write to stdout: it is closed; write to a file with -o FILE")
    try:
        try:
            out.write(text)
        except UnicodeEncodeError:  # a name that is not UTF-8, or a terminal that is not
            encoding = getattr(out, "encoding", None) or "utf-8"
            out.write(printable(text).encode(encoding, "backslashreplace").decode(encoding))
        out.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        discard_stdout()
        raise GpuoptError(f"cannot write to stdout: {reason(exc)}") from None


def stdout_usable() -> bool:
    """Whether stdout is there to write to: not None (started with fd 1 closed), not closed by
    the script, its descriptor open."""
    out = sys.stdout
    if out is None or out.closed:
        return False
    try:
        fd = out.fileno()
    except (OSError, ValueError, AttributeError) as exc:  # a stream with no fd (captured)
        log.debug("stdout has no descriptor (%s): taken as open", exc)
        return True
    try:
        os.fstat(fd)
    except OSError as exc:
        log.debug("stdout's descriptor %d is closed: %s", fd, exc)
        return False
    return True


def discard_stdout() -> None:
    """Send what is still buffered for stdout nowhere: it would fail again at exit, with
    Python's own message after gpuopt's."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError) as exc:
        log.debug("stdout not pointed at /dev/null: %s", exc)
