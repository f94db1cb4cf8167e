"""``gpuopt optimize --write`` under races and signals (docs/reliability.md): an edit made up to
the rename is kept and refused; SIGTERM or Ctrl-C at any moment leaves the script as it was or
as rewritten (a backup only beside a rewritten file, no temporary file), and no child process
behind; a write that cannot be done (a read-only directory, 999 backups, a script deleted or
truncated after planning) and every bad flag are refused in one line before the runs are spent.

Every fault is injected at a named moment (a patched function, or the script itself sending the
signal): nothing here depends on timing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import gpuopt.atomic_write as atomic_write
import gpuopt.commands.optimize as command_module
import gpuopt.optimize.output.source_files as source_files
from gpuopt.commands.cli import app
from gpuopt.errors import GpuoptError
from gpuopt.model.document import empty_profile
from gpuopt.optimize.output.source_files import (
    BACKUP_SUFFIX,
    MAX_BACKUPS,
    SourceSet,
    write_in_place,
)
from gpuopt.runner.run_dir import RunDirectory
from gpuopt.source import Rewrite

runner = CliRunner()
SCRIPT = """\
import torch

model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(5):
    opt.zero_grad(set_to_none=False)
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
"""
FIXED = SCRIPT.replace("set_to_none=False", "set_to_none=True")
PLANNED = ["optimize", "--baseline", "base", "--fix", "zero-grad", "--quiet", "--write"]


def _one_line(output: str, *needles: str) -> str:
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuopt: error: "), output
    assert "Traceback" not in output
    for needle in needles:
        assert needle in lines[0], output
    return lines[0]


def _left_behind(folder: Path) -> list[str]:
    """Temporary files and backups in the user's folder."""
    return sorted(
        p.name for p in folder.iterdir() if p.name.endswith(".tmp") or BACKUP_SUFFIX in p.name
    )


@pytest.fixture
def planned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A script with one source fix (zero-grad) and an earlier profile to plan from."""
    (tmp_path / "train.py").write_text(SCRIPT)
    RunDirectory(tmp_path / "base").write_profile(empty_profile("train.py"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def no_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any run started fails the test: what is refused must be refused before the runs."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a run was started")

    monkeypatch.setattr(command_module, "run_once", refuse)
    yield


# -- an edit up to the rename ------------------------------------------------------------------
def _bump(text: str, name: str) -> Rewrite:
    return Rewrite(text.replace("x = 1", "x = 2"), notes=["x"])


@pytest.mark.parametrize("moment", ["the temporary is whole", "the backup is made"])
def test_an_edit_up_to_the_rename_is_kept_and_refused(
    moment: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append to the script after gpuopt's last check and before its rename was lost (the
    rename won): the file's content is checked once the temporary is written and again after
    the backup, right before the rename."""
    src = tmp_path / "train.py"
    src.write_text("x = 1\n")
    sources = SourceSet(cwd=tmp_path)
    sources.rewrite("train.py", _bump)
    edited = "x = 1\nprint('appended by the user')\n"
    if moment == "the temporary is whole":
        real_keep, calls = atomic_write._keep, []

        def keep_then_edit(tmp: str, *keep: int) -> None:
            real_keep(tmp, *keep)
            calls.append(tmp)
            if len(calls) == 1:  # the new text's temporary (the backup's comes later)
                src.write_text(edited)

        monkeypatch.setattr(atomic_write, "_keep", keep_then_edit)
    else:
        real_backup = source_files._backup

        def backup_then_edit(sf: Any) -> Path:
            made = real_backup(sf)
            src.write_text(edited)
            return made

        monkeypatch.setattr(source_files, "_backup", backup_then_edit)
    with pytest.raises(GpuoptError, match="changed while optimize ran"):
        write_in_place(sources.changed())
    assert src.read_text() == edited
    assert _left_behind(tmp_path) == []  # its backup taken back, the temporary removed


def test_the_content_is_compared_not_the_size_or_the_time(tmp_path: Path) -> None:
    """An edit of the same size, with the file's times set back: still refused."""
    src = tmp_path / "train.py"
    src.write_text("x = 1\n")
    sources = SourceSet(cwd=tmp_path)
    sources.rewrite("train.py", _bump)
    st = src.stat()
    src.write_text("x = 7\n")
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(GpuoptError, match="changed while optimize ran"):
        write_in_place(sources.changed())
    assert src.read_text() == "x = 7\n" and _left_behind(tmp_path) == []


# -- signals -----------------------------------------------------------------------------------
DRIVER = """\
import os, signal, sys
import gpuopt.atomic_write as atomic_write
import gpuopt.optimize.output.source_files as source_files

moment, signame, script = sys.argv[1], sys.argv[2], os.path.realpath("train.py")
sig = getattr(signal, signame)
sent = []


def send():
    if not sent:
        sent.append(1)
        os.kill(os.getpid(), sig)


real_keep, real_backup, real_replace = atomic_write._keep, source_files._backup, os.replace


def keep(tmp, *args):
    real_keep(tmp, *args)
    if moment == "temporary" and os.path.basename(tmp).startswith(".train.py."):
        send()


def backup(sf):
    made = real_backup(sf)
    if moment == "backup":
        send()
    return made


def replace(src, dst):
    if moment == "rename" and os.path.realpath(dst) == script:
        send()
    real_replace(src, dst)


atomic_write._keep, source_files._backup, os.replace = keep, backup, replace
sys.argv = ["gpuopt", *sys.argv[3:]]
from gpuopt.commands.cli import main

main()
"""


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("moment", ["temporary", "backup", "rename"])
def test_a_signal_while_the_script_is_written_leaves_it_whole(
    moment: str, signame: str, planned: Path
) -> None:
    """SIGTERM or Ctrl-C while the rewrite was written left ``.train.py.*.tmp`` and a backup
    beside a file not rewritten. The signals are held while the files are replaced: the script
    is rewritten whole, its backup beside it, no temporary file; then the signal ends gpuopt."""
    (planned / "driver.py").write_text(DRIVER)
    argv = [*PLANNED, "--no-measure", "-o", "o", "train.py"]
    r = subprocess.run(
        [sys.executable, "driver.py", moment, signame, *argv],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "Traceback" not in r.stderr, r.stderr
    if signame == "SIGTERM":
        assert r.returncode == -signal.SIGTERM, r.stderr  # ended by the signal, as without gpuopt
    else:
        assert r.returncode != 0, r.stderr
    assert (planned / "train.py").read_text() == FIXED
    assert (planned / f"train.py{BACKUP_SUFFIX}").read_text() == SCRIPT
    assert _left_behind(planned) == [f"train.py{BACKUP_SUFFIX}"]
    assert f"train.py: written (backup train.py{BACKUP_SUFFIX})" in r.stderr  # said before it ends


KILLS_ITS_OPTIMIZE = """\
import os, signal, subprocess, sys, time

sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open("pids.txt", "w") as fh:
    fh.write(f"{os.getpid()} {sleeper.pid}\\n")
os.kill(os.getppid(), getattr(signal, sys.argv[1]))  # gpuopt optimize, which started this run
time.sleep(600)
"""


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pids: list[int]) -> list[int]:
    """The pids still running once each was given up to 60 s to end (a bound, never a
    measurement: a regression leaves them sleeping for 10 minutes)."""
    import time

    deadline = time.monotonic() + 60
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if _running(p)]


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_signal_during_a_run_ends_the_runs_and_leaves_the_script(
    signame: str, tmp_path: Path
) -> None:
    """SIGTERM while a run went on left its ``gpuopt profile`` child (and what that started)
    running after gpuopt returned. Each run is a session of its own, killed whole and reaped;
    the script is untouched, nothing is left beside it, and gpuopt ends by the signal (SIGTERM)
    or as Ctrl-C ends a command (130)."""
    script = tmp_path / "train.py"
    script.write_text(KILLS_ITS_OPTIMIZE)
    r = subprocess.run(
        [sys.executable, "-m", "gpuopt", "optimize", "--write", "--steps", "2", "--quiet"]
        + ["-o", "o", "train.py", signame],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    pids = [int(p) for p in (tmp_path / "pids.txt").read_text().split()]
    try:
        assert r.returncode == (-signal.SIGTERM if signame == "SIGTERM" else 130), r.stderr
        assert "Traceback" not in r.stderr, r.stderr
        assert _wait_gone(pids) == []
        assert script.read_text() == KILLS_ITS_OPTIMIZE
        assert _left_behind(tmp_path) == []
    finally:
        for pid in pids:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


# -- refused before the runs -------------------------------------------------------------------
def _read_only_folder(folder: Path) -> Path:
    ro = folder / "ro"
    ro.mkdir()
    (ro / "train.py").write_text(SCRIPT)
    os.chmod(ro, 0o555)
    return ro


@pytest.fixture
def writable_again(tmp_path: Path) -> Iterator[None]:
    yield
    for p in tmp_path.rglob("*"):
        if p.is_dir() and not p.is_symlink():
            os.chmod(p, 0o755)


@pytest.mark.parametrize("case", ["read-only directory", "a link into one", "999 backups"])
def test_a_write_that_cannot_be_done_is_refused_before_any_run(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_runs: None, writable_again: None
) -> None:
    """A directory of mode 0555 is honoured as root too (as a read-only file is), and 999 backups
    are found before any run. Each is one line, before the baseline run."""
    monkeypatch.chdir(tmp_path)
    if case == "999 backups":
        (tmp_path / "train.py").write_text(SCRIPT)
        for n in range(1, MAX_BACKUPS + 1):
            (tmp_path / (f"train.py{BACKUP_SUFFIX}" + ("" if n == 1 else f".{n}"))).touch()
        target, needle = tmp_path / "train.py", "999 backups there already"
    else:
        target = _read_only_folder(tmp_path) / "train.py"
        needle = "its directory is not writable (mode 0555"
        if case == "a link into one":
            os.symlink(target, tmp_path / "link.py")
    given = {"read-only directory": "ro/train.py", "a link into one": "link.py"}.get(
        case, "train.py"
    )
    r = runner.invoke(app, ["optimize", "--write", "--steps", "2", "-o", "o", given])
    assert r.exit_code == 2, r.output
    _one_line(r.output, needle, "nothing was written")
    assert target.read_text() == SCRIPT
    assert not (tmp_path / "o").exists()  # refused before anything was made


def test_every_flag_is_checked_before_the_first_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_runs: None
) -> None:
    """``--memory-for h1000`` (no such device) was refused after the baseline's folder was
    made; now before anything is made or run."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(SCRIPT)
    r = runner.invoke(app, ["optimize", "--memory-for", "h1000", "--steps", "2", "train.py"])
    assert r.exit_code == 2, r.output
    _one_line(r.output, "--memory-for h1000")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]  # no gpuopt-runs/


@pytest.mark.parametrize("how", ["deleted", "truncated"])
def test_a_script_deleted_or_truncated_after_planning_is_said_before_the_runs(
    how: str, planned: Path, monkeypatch: pytest.MonkeyPatch, no_runs: None
) -> None:
    real_plan = command_module._plan

    def plan_then_change(*args: Any) -> Any:
        fixes = real_plan(*args)
        if how == "deleted":
            (planned / "train.py").unlink()
        else:
            (planned / "train.py").write_text("")
        return fixes

    monkeypatch.setattr(command_module, "_plan", plan_then_change)
    r = runner.invoke(app, [*PLANNED, "-o", "o", "train.py"])
    assert r.exit_code == 2, r.output
    _one_line(r.output, "train.py", "changed while optimize ran")
    assert _left_behind(planned) == []


def test_a_script_changed_between_two_runs_is_said_before_the_next(
    planned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Truncated while the first run went on: the next run is not started (it measured the
    changed file, and every run after it would have been spent for a refusal)."""
    from gpuopt.model.optimize import RunResult
    from gpuopt.optimize.run.runs import Done

    started: list[str] = []

    def first_run_truncates(launch: Any, spec: Any) -> Done:
        started.append(spec.label)
        assert len(started) == 1, f"a run was started after the change: {started}"
        (planned / "train.py").write_text("")
        result = RunResult(label=spec.label, role=spec.role, dir="runs/x")
        result.status = "ok"
        return Done(result, empty_profile("train.py"), "", "", spec.dir)

    monkeypatch.setattr(command_module, "run_once", first_run_truncates)
    r = runner.invoke(app, [*PLANNED, "-o", "o", "train.py"])
    assert r.exit_code == 2, r.output
    _one_line(r.output, "train.py", "changed while optimize ran")
    assert started == ["baseline 1"]
