"""``gpuopt optimize --write`` and ``--diff`` treat a user's source as sacred
(docs/reliability.md): a backup never replaces a file, a file changed while optimize ran is
never rewritten (checked right before writing, against the text planned and measured), a UTF-8
byte-order mark and the mode bits are kept, a read-only file is refused whoever runs gpuopt, and
the diff applies with ``patch -p0`` and ``git apply`` whatever the file is called."""

from __future__ import annotations

import codecs
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import gpuopt.optimize.output.results as results_module
import gpuopt.optimize.output.source_files as source_files
from gpuopt.commands.cli import app
from gpuopt.errors import GpuoptError
from gpuopt.model.document import empty_profile
from gpuopt.optimize.output.source_files import (
    BACKUP_SUFFIX,
    SourceSet,
    diff_name,
    file_diff,
    unified_diff,
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


def _bump(text: str, name: str) -> Rewrite:
    new = text.replace("x = 1", "x = 2")
    return Rewrite(new, notes=["x"] if new != text else [])


def _read_and_rewrite(folder: Path, name: str = "train.py") -> SourceSet:
    sources = SourceSet(cwd=folder)
    sources.rewrite(name, _bump)
    return sources


# -- backups -----------------------------------------------------------------------------------
def test_a_backup_never_replaces_a_file(tmp_path: Path) -> None:
    src = tmp_path / "train.py"
    src.write_text("x = 1\n")
    mine = tmp_path / f"train.py{BACKUP_SUFFIX}"
    mine.write_text("the user's own file of that name\n")
    (done,) = write_in_place(_read_and_rewrite(tmp_path).changed())
    assert mine.read_text() == "the user's own file of that name\n"
    second = tmp_path / f"train.py{BACKUP_SUFFIX}.2"
    assert second.read_text() == "x = 1\n" and done.endswith(f"(backup {second.name})")
    # a second --write after an edit: the first backup (the original text) is kept too
    src.write_text("x = 1\ny = 0\n")
    (done,) = write_in_place(_read_and_rewrite(tmp_path).changed())
    assert second.read_text() == "x = 1\n"
    third = tmp_path / f"train.py{BACKUP_SUFFIX}.3"
    assert third.read_text() == "x = 1\ny = 0\n" and third.name in done
    assert src.read_text() == "x = 2\ny = 0\n"


# -- a file changed since it was read ----------------------------------------------------------
def test_a_file_changed_between_the_check_and_the_rename_is_not_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process writes the file after gpuopt checked it, while it makes the backup:
    checked again right before the rename, refused, the other process's text kept."""
    src = tmp_path / "train.py"
    src.write_text("x = 1\n")
    sources = _read_and_rewrite(tmp_path)
    real_backup = source_files._backup

    def backup_then_edit(sf: Any) -> Path:
        made = real_backup(sf)
        src.write_text("x = 1  # edited meanwhile\n")
        return made

    monkeypatch.setattr(source_files, "_backup", backup_then_edit)
    with pytest.raises(GpuoptError, match="changed while optimize ran"):
        write_in_place(sources.changed())
    assert src.read_text() == "x = 1  # edited meanwhile\n"
    assert not (tmp_path / f"train.py{BACKUP_SUFFIX}").exists()  # its backup taken back


def test_every_source_set_of_a_command_starts_from_the_first_read(tmp_path: Path) -> None:
    """optimize builds a SourceSet for each run and one for the diff: sharing their reads, the
    text planned, measured and written is the file as first read."""
    src = tmp_path / "train.py"
    src.write_text("x = 1\n")
    reads: dict[Path, bytes] = {}
    first = SourceSet(cwd=tmp_path, reads=reads)
    first.rewrite("train.py", _bump)
    src.write_text("x = 1\nz = 9\n")  # edited while the runs go on
    later = SourceSet(cwd=tmp_path, reads=reads)
    later.rewrite("train.py", _bump)
    assert later.changed()[0].new == "x = 2\n"  # from the text read, not the edited one
    with pytest.raises(GpuoptError, match="changed while optimize ran"):
        write_in_place(later.changed())
    assert src.read_text() == "x = 1\nz = 9\n"


@pytest.fixture
def planned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A script with one source fix (zero-grad) and an earlier profile to plan from: optimize
    --no-measure then runs nothing."""
    (tmp_path / "train.py").write_text(SCRIPT)
    RunDirectory(tmp_path / "base").write_profile(empty_profile("train.py"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


OPTIMIZE = ["optimize", "--baseline", "base", "--no-measure", "--fix", "zero-grad", "--quiet"]


def test_optimize_refuses_a_script_edited_while_it_ran(
    planned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rewrite landed on a text other than the one planned and measured (rc 0)."""
    real = results_module.fill_results

    def edited_meanwhile(*args: Any, **kwargs: Any) -> None:
        (planned / "train.py").write_text(SCRIPT + "print('added by the user')\n")
        real(*args, **kwargs)

    monkeypatch.setattr(results_module, "fill_results", edited_meanwhile)
    r = runner.invoke(app, [*OPTIMIZE, "--write", "-o", "o", "train.py"])
    assert r.exit_code == 2, r.output
    errors = [line for line in r.output.splitlines() if line.startswith("gpuopt: error:")]
    assert len(errors) == 1 and "train.py: changed while optimize ran" in errors[0]
    assert (planned / "train.py").read_text().endswith("print('added by the user')\n")
    assert not list(planned.glob(f"*{BACKUP_SUFFIX}*"))


def test_optimize_refuses_a_read_only_script_before_any_run(planned: Path) -> None:
    script = planned / "train.py"
    os.chmod(script, 0o444)
    r = runner.invoke(app, [*OPTIMIZE, "--write", "-o", "o", "train.py"])
    assert r.exit_code == 2
    assert "train.py: is read-only (mode 0444)" in r.output and "Traceback" not in r.output
    assert script.read_text() == SCRIPT
    assert not (planned / "o" / "optimize.json").exists()  # refused before the end


# -- what a written file keeps -----------------------------------------------------------------
def test_write_keeps_a_byte_order_mark_and_the_mode(planned: Path) -> None:
    script = planned / "train.py"
    script.write_bytes(codecs.BOM_UTF8 + SCRIPT.encode())
    os.chmod(script, 0o600)
    r = runner.invoke(app, [*OPTIMIZE, "--write", "-o", "o", "train.py"])
    assert r.exit_code == 0, r.output
    assert script.read_bytes() == codecs.BOM_UTF8 + FIXED.encode()
    backup = planned / f"train.py{BACKUP_SUFFIX}"
    assert backup.read_bytes() == codecs.BOM_UTF8 + SCRIPT.encode()  # the bytes as read
    assert stat.S_IMODE(script.stat().st_mode) == 0o600
    assert stat.S_IMODE(backup.stat().st_mode) == 0o600  # a private file's backup stays private


def test_a_diff_of_a_file_with_a_byte_order_mark_applies(tmp_path: Path) -> None:
    src = tmp_path / "train.py"
    src.write_bytes(codecs.BOM_UTF8 + b"x = 1\ny = 2\n")
    sources = _read_and_rewrite(tmp_path)
    diff = unified_diff(sources.changed())
    _apply(diff, tmp_path, "patch")
    assert src.read_bytes() == codecs.BOM_UTF8 + b"x = 2\ny = 2\n"


# -- the diff applies whatever the file is called ----------------------------------------------
NAMES = [
    "plain.py",
    "my dir/fix me.py",
    "two  spaces .py",
    "tab\there.py",
    'quo"te.py',
    "back\\slash.py",
    "été.py",
]


def _apply(diff: str, folder: Path, tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")
    (folder.parent / f"{folder.name}.diff").write_text(diff)
    patch_file = str(folder.parent / f"{folder.name}.diff")
    if tool == "git":
        subprocess.run(["git", "init", "-q", "."], cwd=folder, check=True)
        argv = ["git", "apply", patch_file]
    else:
        argv = ["patch", "-p0", "-i", patch_file]
    r = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (diff, r.stdout, r.stderr)


@pytest.mark.parametrize("tool", ["patch", "git"])
@pytest.mark.parametrize("name", NAMES)
def test_the_diff_applies_with_patch_and_git_whatever_the_name(
    name: str, tool: str, tmp_path: Path
) -> None:
    """'my dir/fix me.py' failed under patch -p0: git ends a name holding a space with a tab,
    and C-quotes one holding a quote, a backslash, a control character or non-ASCII."""
    folder = tmp_path / "work"
    src = folder / name
    src.parent.mkdir(parents=True)
    src.write_text("x = 1\ny = 2\n")
    sources = _read_and_rewrite(folder, name)
    _apply(file_diff(sources.changed()[0]), folder, tool)
    assert src.read_text() == "x = 2\ny = 2\n"


def test_diff_names_follow_gits_rules() -> None:
    assert diff_name("a/b.py") == "./a/b.py"
    assert diff_name("my dir/x.py") == "./my dir/x.py\t"
    assert diff_name('a"b.py') == '"./a\\"b.py"'
    assert diff_name("é.py") == '"./\\303\\251.py"'
