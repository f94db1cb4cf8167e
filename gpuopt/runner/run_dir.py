"""The run directory: where it is, that it can be written, and writing ``profile.json`` there.

``profile.json`` is always written whole (a temporary file, then a rename): a reader never sees
half a document, and a run killed outright leaves the last complete one.
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path

from gpuopt.atomic_write import write_atomic
from gpuopt.errors import GpuoptError
from gpuopt.model.document import encode
from gpuopt.model.profile import Profile

PROFILE_NAME = "profile.json"


def default_out_dir(stem: str, now: _dt.datetime | None = None) -> Path:
    """``gpuopt-runs/<stem>-<YYYYmmdd-HHMMSS>``, with ``-2``, ``-3`` ... if that one exists."""
    now = now or _dt.datetime.now()
    base = Path("gpuopt-runs") / f"{stem}-{now:%Y%m%d-%H%M%S}"
    out, n = base, 1
    while out.exists():
        n += 1
        out = base.with_name(f"{base.name}-{n}")
    return out


def prepare_out_dir(out: Path) -> Path:
    """Create the run directory (and parents); refuse one that cannot be a writable directory."""
    if out.exists() and not out.is_dir():
        raise GpuoptError(f"{out}: exists and is not a directory; pick another -o DIR")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GpuoptError(f"{out}: cannot create run directory: {exc.strerror or exc}") from None
    if not os.access(out, os.W_OK):
        raise GpuoptError(f"{out}: run directory is not writable")
    return out


def write_profile(profile: Profile, out: Path) -> Path:
    """Write ``out/profile.json`` atomically; the path written."""
    path = out / PROFILE_NAME
    write_atomic(path, encode(profile))
    return path
