"""An output that resolves to an input is refused (docs/reliability.md): a symbolic link or a hard
link to an input file, or to a file read inside an input directory (a run's ``profile.json``, a
trace of a folder, an optimize directory's ``optimize.json``), for every output of every command;
checked before the work, and again by the writer itself right before each write."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from gate_support import noisy, run, write
from trace_helpers import cpu, write_trace
from typer.testing import CliRunner

from gpuopt import inputs
from gpuopt.atomic_write import write_atomic
from gpuopt.commands.cli import app
from gpuopt.errors import GpuoptError
from gpuopt.optimize.output.source_files import SourceFile, write_private_copies
from gpuopt.paths import write_output

runner = CliRunner()


def _one_line(output: str) -> str:
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuopt: error: "), output
    assert "Traceback" not in output
    return lines[0]


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    """Two run directories, a folder of traces and an optimize directory; their files' bytes."""
    a, b = tmp_path / "a", tmp_path / "b"
    for d, seed in ((a, 1), (b, 2)):
        d.mkdir()
        write(d / "profile.json", run(noisy(0.100, spread=0.005, seed=seed)))
    traces = tmp_path / "traces"
    traces.mkdir()
    write_trace(traces / "rank0.json", [cpu("aten::mm", 0, 50)])
    opt = tmp_path / "opt"
    opt.mkdir()
    (opt / "optimize.json").write_text('{"schema": "not read: refused before"}\n')
    return {"a": a, "b": b, "traces": traces, "opt": opt}


def _link(kind: str) -> Callable[[Path, Path], None]:
    return os.symlink if kind == "symbolic" else os.link


# (command line with OUT for the output, the input file OUT is made a link to)
CASES = {
    "report -o .json": (["report", "{a}", "-o", "OUT"], "a/profile.json", ".json"),
    "report -o .txt": (["report", "{a}", "-o", "OUT"], "a/profile.json", ".txt"),
    "report -o .md": (["report", "{a}", "-o", "OUT"], "a/profile.json", ".md"),
    "report -o .html": (["report", "{a}", "-o", "OUT"], "a/profile.json", ".html"),
    "report DIR -o a trace in DIR": (
        ["report", "{traces}", "-o", "OUT"],
        "traces/rank0.json",
        ".md",
    ),
    "report OPT_DIR -o": (["report", "{opt}", "-o", "OUT"], "opt/optimize.json", ".txt"),
    "compare -o": (["compare", "{a}", "{b}", "-o", "OUT"], "b/profile.json", ".md"),
    "check --junit": (
        ["check", "{a}", "--baseline", "{b}", "--junit", "OUT"],
        "a/profile.json",
        ".xml",
    ),
    "check -o": (["check", "{a}", "--baseline", "{b}", "-o", "OUT"], "b/profile.json", ".txt"),
}


@pytest.mark.parametrize("kind", ["symbolic", "hard"])
@pytest.mark.parametrize("case", list(CASES))
def test_an_output_linked_to_an_input_is_refused_and_the_input_kept(
    case: str, kind: str, world: dict[str, Path], tmp_path: Path
) -> None:
    """``ln -s run/profile.json alias.json; gpuopt report run -o alias.json`` must not rewrite the
    run's profile, nor the rename replace a hard link: refused in one line, the input kept."""
    argv, target, suffix = CASES[case]
    out = tmp_path / f"alias{suffix}"
    _link(kind)(tmp_path / target, out)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    r = runner.invoke(app, [a.format(**world) if a != "OUT" else str(out) for a in argv])
    assert r.exit_code == 2, r.output
    line = _one_line(r.output)
    assert "is an input of this command" in line and target in line, line
    assert "symbolic link" in line if kind == "symbolic" else "hard link" in line
    assert {p: p.read_bytes() for p in before} == before  # nothing written, the input whole
    if kind == "symbolic":
        assert out.is_symlink()
    else:
        assert os.stat(out).st_ino == os.stat(tmp_path / target).st_ino  # still one file


@pytest.mark.parametrize("kind", ["symbolic", "hard"])
def test_the_step_summary_linked_to_a_profile_is_not_appended(
    kind: str, world: dict[str, Path], tmp_path: Path
) -> None:
    summary = tmp_path / "summary.md"
    _link(kind)(world["a"] / "profile.json", summary)
    before = (world["a"] / "profile.json").read_bytes()
    r = runner.invoke(
        app,
        ["check", str(world["a"]), "--baseline", str(world["b"])],
        env={"GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert r.exit_code in (0, 1), r.output
    assert "not appended to GITHUB_STEP_SUMMARY" in r.output and "a/profile.json" in r.output
    assert (world["a"] / "profile.json").read_bytes() == before


def test_an_output_that_becomes_a_link_after_the_check_is_refused_by_the_writer(
    world: dict[str, Path], tmp_path: Path
) -> None:
    """The writer checks again: an output made a link to an input while the command worked
    (after its check before the work) is not written through, nor replaced."""
    inputs.clear()
    profile = world["a"] / "profile.json"
    before = profile.read_bytes()
    out = tmp_path / "report.html"
    from gpuopt.paths import check_output

    check_output(out, [world["a"]])  # nothing there yet: passes
    os.symlink(profile, out)  # meanwhile
    with pytest.raises(GpuoptError, match="is an input of this command"):
        write_output(out, b"<html></html>")
    os.unlink(out)
    os.link(profile, out)
    with pytest.raises(GpuoptError, match="hard link"):
        write_atomic(out, b"<html></html>")  # the lowest writer, too
    assert profile.read_bytes() == before and os.stat(out).st_ino == os.stat(profile).st_ino
    inputs.clear()
    write_output(out, b"<html></html>")  # no command's input any more: written (replaced)
    assert profile.read_bytes() == before


def test_a_run_directorys_file_linked_to_the_script_is_not_written_through(
    tmp_path: Path,
) -> None:
    """optimize's private copies of a rewritten file: a link left in their folder to the
    user's script is replaced, the script untouched."""
    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    into = tmp_path / "o" / "sources"
    into.mkdir(parents=True)
    os.symlink(script, into / "00-train.py")
    sf = SourceFile(script, "train.py", "x = 1\n", "", "x = 2\n", raw=b"x = 1\n")
    copies = write_private_copies([sf], into)
    assert script.read_text() == "x = 1\n"
    copy = Path(copies[str(script)])
    assert not copy.is_symlink() and copy.read_text() == "x = 2\n"


@pytest.mark.parametrize("kind", ["symbolic", "hard"])
def test_a_profile_run_directory_whose_profile_links_to_the_script_is_refused(
    kind: str, tmp_path: Path
) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    out = tmp_path / "run"
    out.mkdir()
    _link(kind)(script, out / "profile.json")
    r = runner.invoke(app, ["profile", "--force", "-o", str(out), str(script)])
    assert r.exit_code == 2, r.output
    assert "is an input of this command" in _one_line(r.output)
    assert script.read_text() == "print('hi')\n"


@pytest.mark.parametrize("kind", ["symbolic", "hard"])
def test_optimize_never_writes_its_document_over_the_baseline_it_plans_from(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuopt.model.document import empty_profile
    from gpuopt.runner.run_dir import RunDirectory

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("x = 1\n")
    RunDirectory(tmp_path / "base").write_profile(empty_profile("train.py"))
    before = (tmp_path / "base" / "profile.json").read_bytes()
    (tmp_path / "o").mkdir()
    _link(kind)(tmp_path / "base" / "profile.json", tmp_path / "o" / "optimize.json")
    argv = ["optimize", "--baseline", "base", "--no-measure", "--force", "-o", "o", "train.py"]
    r = runner.invoke(app, argv)
    assert r.exit_code == 2, r.output
    assert "base/profile.json" in _one_line(r.output)
    assert (tmp_path / "base" / "profile.json").read_bytes() == before
