"""Writing a file so that a reader never sees half of it: a temporary file, then a rename; never
over one of the command's inputs (:mod:`gpuopt.inputs`), checked right before the write."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

from gpuopt import inputs
from gpuopt.debug import logger

log = logger(__name__)


def _read_umask() -> int:
    """The process's umask, read once at import (before any user code or thread runs): setting
    it to read it back, later, could hand a file another thread creates meanwhile mode 0666."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def temp_prefix(name: str) -> str:
    """A temporary file's prefix for ``name``: hidden (a folder of traces being read skips it)
    and short, so that a name near the file system's limit still has a temporary beside it."""
    return "." + name[:40] + "."


def write_atomic(
    path: Path,
    data: bytes,
    replace: bool = True,
    keep: tuple[int, int, int] | None = None,
    over_input: bool = False,
    before_replace: Callable[[], None] | None = None,
) -> None:
    """Write via a temporary file in the same directory, then rename it over ``path``; with
    ``replace=False`` the file is put in place only if ``path`` does not exist yet (else
    :class:`FileExistsError`), still whole or not at all. ``keep``: the (mode, uid, gid) the
    file gets (the file it replaces had them; the owner only where this process may set it),
    else the usual mode for a new file. ``path`` resolving to one of the command's inputs is a
    :class:`~gpuopt.errors.GpuoptError`, unless ``over_input`` (``optimize --write``, whose
    output is its input). ``before_replace``: called once the temporary file is whole, right
    before the rename; what it raises leaves ``path`` as it was and removes the temporary."""
    if not over_input:
        inputs.refuse(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    import tempfile  # here, not at the top: `gpuopt report` to stdout never needs it

    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path.name), suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        if keep is None:
            os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file the usual mode
        else:
            _keep(tmp, *keep)
        if before_replace is not None:
            before_replace()
        if replace:
            os.replace(tmp, path)
        else:
            _link_new(tmp, path, data)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:  # renamed into place: nothing left to remove
            pass
        except OSError as exc:
            log.debug("temporary %s not removed: %s", tmp, exc)


def _keep(tmp: str, mode: int, uid: int, gid: int) -> None:
    """The replaced file's owner (where allowed: as root, or a group of one's own) and mode."""
    try:
        os.chown(tmp, uid, gid)
    except OSError as exc:
        log.debug("%s's owner not kept: %s", tmp, exc)
    os.chmod(tmp, mode)


def _link_new(tmp: str, path: Path, data: bytes) -> None:
    """``tmp`` at ``path`` unless ``path`` exists: a hard link is atomic and never replaces; on a
    file system without hard links, an exclusive create."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        log.debug("no hard link here (%s): exclusive create instead", exc)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
