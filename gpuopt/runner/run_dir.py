"""The run directory: the one module that writes into it.

* Its path is made absolute when the run starts, so a script that ``os.chdir()``s cannot move
  the profile elsewhere.
* ``profile.json`` is always written whole (a temporary file, then a rename): a reader never sees
  half a document, and a run killed outright leaves the last complete one.
* Only the process that prepared the directory writes: a child the script ``os.fork()``s, which
  carries a copy of gpuopt, never replaces the parent's document.
* A directory that already holds a run's ``profile.json`` is refused unless ``--force``; with it,
  the earlier run's files are removed first, and the user is told so (a reused directory never
  mixes two runs silently). A run claims its directory with a placeholder profile that is put in
  place only if none is there: of two runs started into one directory, the second is refused;
  default directories are created exclusively, so runs started in the same second get one each.
* Every OS error (no space, no permission, a read-only file system) is a one-line
  :class:`GpuoptError` naming the file and the reason: exit 2, never a traceback.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
import stat
import sys
from pathlib import Path

from gpuopt import debug
from gpuopt.atomic_write import write_atomic
from gpuopt.errors import GpuoptError
from gpuopt.model.document import empty_profile, encode
from gpuopt.model.profile import Profile
from gpuopt.paths import WINDOW_TRACE_NAME, refuse_inputs, stat_or_none

log = debug.logger(__name__)

PROFILE_NAME = "profile.json"
JOB_NAME = "gpuopt-job.txt"  # a multi-node job's name, in the run directory its nodes share


class RunDirectory:
    """A prepared run directory and the process that owns it."""

    def __init__(self, path: Path, shown: str | None = None) -> None:
        self.path = path.absolute()
        self.shown = shown or str(path)  # as the user gave it, for messages
        self.owner = os.getpid()

    @classmethod
    def prepare(
        cls, out: Path, force: bool = False, reads: list[Path] | None = None
    ) -> RunDirectory:
        """Create the run directory (and parents); refuse one that cannot be a writable
        directory, or that holds an earlier run unless ``force``, or whose files would be one of
        the run's inputs (``reads``: the script named profile.json in DIR, even with --force)."""
        for name in (PROFILE_NAME, WINDOW_TRACE_NAME, JOB_NAME):
            refuse_inputs(out / name, reads or [], "-o")
        st = stat_or_none(out)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise GpuoptError(f"{out}: exists and is not a directory; pick another -o DIR")
        earlier = _earlier_run(out)
        if earlier and not force:
            raise GpuoptError(
                f"{out}: already holds a profile from an earlier run; pick another -o DIR, "
                "or add --force to replace it"
            )
        if earlier:
            _remove(earlier, out)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise GpuoptError(f"{out}: cannot create run directory: {_reason(exc)}") from None
        if not os.access(out, os.W_OK):
            raise GpuoptError(f"{out}: run directory is not writable")
        return cls(out)

    @classmethod
    def prepare_job(cls, out: Path, job: str, force: bool = False) -> RunDirectory:
        """The run directory of one node of a multi-node job: every node's launcher may be given
        the same directory (a shared file system). The first to come prepares it as
        :meth:`prepare` does and names the job in it; the others join it. No placeholder is
        claimed (each launcher writes the merge of every rank once the job ends); a directory
        that holds a finished job (its merged profile) is an earlier run."""
        marker = out / JOB_NAME
        if out.is_dir() and not (out / PROFILE_NAME).exists():
            try:
                same = marker.read_text(encoding="utf-8").strip() == job
            except OSError as exc:
                log.debug("%s not read (%s): another job's", marker, exc)
                same = False
            if same:
                return cls(out)
        run_dir = cls.prepare(out, force=force)
        try:
            write_atomic(marker, (job + "\n").encode("utf-8"))
        except OSError as exc:
            raise GpuoptError(f"{marker}: cannot write: {_reason(exc)}") from None
        return run_dir

    @property
    def profile_path(self) -> Path:
        return self.path / PROFILE_NAME

    def owned(self) -> bool:
        """Whether this process may write here (False in a child the script forked)."""
        return os.getpid() == self.owner

    def write_profile(self, profile: Profile) -> Path | None:
        """Write ``profile.json`` atomically; the path written, or None in a forked child."""
        if not self.owned():
            return None
        data = encode(profile)
        try:
            write_atomic(self.profile_path, data)
        except OSError as exc:
            raise GpuoptError(
                f"{self.shown}/{PROFILE_NAME}: cannot write the profile: {_reason(exc)}"
            ) from None
        return self.profile_path

    def claim(self, script: str, argv: list[str], rank: int | None = None) -> None:
        """Put a valid profile in place from the first moment (``status: interrupted``, exit code
        137: a process killed before anything else is written leaves this, not nothing), and only
        if no other run put one there since :meth:`prepare` (two runs given the same ``-o DIR``
        at once: the second is refused)."""
        pre = empty_profile(script, argv)
        pre.cwd = os.getcwd()
        pre.started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        pre.rank, pre.status, pre.exit_code = rank, "interrupted", 137
        pre.warnings.append(
            "the run had not started measuring when this was written: if nothing replaced it, "
            "the process was killed outright"
        )
        try:
            write_atomic(self.profile_path, encode(pre), replace=False)
        except FileExistsError:
            raise GpuoptError(
                f"{self.shown}: another gpuopt run started writing here; pick another -o DIR"
            ) from None
        except OSError as exc:
            raise GpuoptError(
                f"{self.shown}/{PROFILE_NAME}: cannot write the profile: {_reason(exc)}"
            ) from None
        # --debug: its lines also in debug.log (debug-2.log, ... beside an earlier one)
        debug.keep_in(self.path)


def _earlier_run(out: Path) -> list[Path]:
    """What an earlier run wrote into ``out``: its profile, the profiler window's trace, its
    ranks' directories (under torchrun); other files are not gpuopt's."""
    if not out.is_dir():
        return []
    names = (out / PROFILE_NAME, out / WINDOW_TRACE_NAME, out / JOB_NAME)
    files = [p for p in names if p.exists() or p.is_symlink()]
    for p in files:
        if p.is_symlink() or not p.is_file():
            raise GpuoptError(
                f"{p}: not a file gpuopt wrote (a link, a FIFO or a device); gpuopt leaves it "
                "alone: pick another -o DIR"
            )
    ranks = [p for p in out.glob("rank-*") if (p / PROFILE_NAME).exists()]
    return [*files, *ranks] if files or ranks else []


def _remove(paths: list[Path], out: Path) -> None:
    try:
        for p in paths:
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink()
    except OSError as exc:
        raise GpuoptError(f"{out}: cannot remove the earlier run's files: {_reason(exc)}") from None
    print(f"gpuopt: {out}: replacing the earlier run's profile (--force)", file=sys.stderr)


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)
