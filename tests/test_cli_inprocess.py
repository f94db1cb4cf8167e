"""The typer layer in-process (CliRunner), the schema checks behind `report`, and fast start."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from typer.testing import CliRunner

from gpuopt.commands.cli import app
from gpuopt.errors import GpuoptError
from gpuopt.model.document import SCHEMA, empty_profile, encode, load_profile, validate
from gpuopt.runner.run_dir import RunDirectory

runner = CliRunner()


def test_version_and_help() -> None:
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.startswith("gpuopt 0.")
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0
    for cmd in ("profile", "report", "schedule"):
        assert cmd in r.output


def test_profile_help_lists_contract_options() -> None:
    r = runner.invoke(app, ["profile", "--help"])
    assert r.exit_code == 0
    for opt in ("--out", "--steps", "--warmup", "--nproc-per-node", "--quiet", "-m"):
        assert opt in r.output


def test_help_and_report_do_not_import_torch(tmp_path: Path) -> None:
    RunDirectory(tmp_path).write_profile(empty_profile("train.py"))
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from gpuopt.commands.cli import app\n"
        "r = CliRunner().invoke(app, ['--help'])\n"
        "assert r.exit_code == 0\n"
        f"r = CliRunner().invoke(app, ['report', {str(tmp_path)!r}, '--format', 'json'])\n"
        "assert r.exit_code == 0, r.output\n"
        "heavy = [m for m in ('torch', 'pandas', 'numpy') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_future_schema_is_refused_with_upgrade_hint(tmp_path: Path) -> None:
    doc = json.loads(encode(empty_profile("train.py")))
    doc["schema"] = "gpuopt.profile/9"
    (tmp_path / "profile.json").write_text(json.dumps(doc))
    r = runner.invoke(app, ["report", str(tmp_path)])
    assert r.exit_code == 2
    assert "newer than this gpuopt reads" in r.output and "pip install -U gpuopt" in r.output


@pytest.mark.parametrize(
    "content,needle",
    [
        (b'{"schema": "gpuopt.profile/1", "status": "ok"', "not valid JSON"),
        (b'{"schema": "gpuopt.profile/0"}', "older than"),
        (b'{"schema": "something/1"}', "not a gpuopt profile"),
        (b"[1, 2]", "not a gpuopt profile"),
    ],
)
def test_corrupt_profiles_are_one_line_errors(tmp_path: Path, content: bytes, needle: str) -> None:
    p = tmp_path / "profile.json"
    p.write_bytes(content)
    with pytest.raises(GpuoptError) as ei:
        load_profile(p)
    assert needle in str(ei.value) and "\n" not in str(ei.value)


def test_run_dir_without_profile(tmp_path: Path) -> None:
    with pytest.raises(GpuoptError, match="no profile.json"):
        load_profile(tmp_path)


def test_validate_catches_what_types_cannot_say() -> None:
    doc = empty_profile("x.py")
    assert validate(doc) == [] and doc.schema == SCHEMA
    doc.breakdown.data_wait = doc.breakdown.compute = 0.7
    assert any("sum to" in p for p in validate(doc))


def test_atomic_write_leaves_no_temp_files(tmp_path: Path) -> None:
    RunDirectory(tmp_path).write_profile(empty_profile("x.py"))
    assert [p.name for p in tmp_path.iterdir()] == ["profile.json"]


def test_report_process_quick_exit_flushes_everything(tmp_path: Path) -> None:
    """`report` leaves through os._exit (no teardown): every byte must still reach the pipe, and
    the exit code must be the command's."""
    fixture = ROOT / "tests" / "data" / "report" / "gpu_ranks.json"
    expected = runner.invoke(app, ["report", str(fixture), "--format", "html"])
    assert expected.exit_code == 0 and len(expected.stdout) > 65536  # more than one pipe buffer
    out = subprocess.run(
        [sys.executable, "-m", "gpuopt", "report", str(fixture), "--format", "html"],
        capture_output=True,
        cwd=ROOT,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode("utf-8") == expected.stdout
    out = subprocess.run(
        [sys.executable, "-m", "gpuopt", "report", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "no such file" in out.stderr


def test_report_never_writes_over_what_it_reads(tmp_path: Path) -> None:
    RunDirectory(tmp_path).write_profile(empty_profile("train.py"))
    before = (tmp_path / "profile.json").read_bytes()
    trace_dir = tmp_path / "traces"
    trace_dir.mkdir()
    (trace_dir / "rank0.json").write_text("{}")
    refused = [
        (tmp_path, tmp_path / "profile.json"),  # the run directory's own document
        (tmp_path / "profile.json", tmp_path / "." / "profile.json"),  # the same file, spelt apart
        (trace_dir, trace_dir / "rank0.json"),  # one of the traces a folder report reads
    ]
    for src, out in refused:
        r = runner.invoke(app, ["report", str(src), "-o", str(out), "--format", "json"])
        assert r.exit_code == 2 and "is an input of this command" in r.output, r.output
    assert (tmp_path / "profile.json").read_bytes() == before
    r = runner.invoke(app, ["report", str(tmp_path), "-o", str(tmp_path / "report.html")])
    assert r.exit_code == 0 and (tmp_path / "report.html").exists()


def test_report_output_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    RunDirectory(tmp_path).write_profile(empty_profile("train.py"))
    (tmp_path / "file").write_text("x")
    for out, needle in [
        (tmp_path, "is a directory; -o takes a file"),
        (tmp_path / "file" / "r.html", "cannot write"),
    ]:
        r = runner.invoke(app, ["report", str(tmp_path), "-o", str(out)])
        assert r.exit_code == 2 and needle in r.output, r.output
        assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["profile"], "profile needs a SCRIPT (or -m MODULE); try: gpuopt profile train.py"),
        (["profile", "--"], "profile needs a SCRIPT"),
        (["profile", "-x", "t.py"], "unknown option '-x' for gpuopt profile; options of gpuopt"),
        (["run", "--fixes", "d"], "run needs a SCRIPT (or -m MODULE); try: gpuopt run --fixes"),
        (["run", "--fixes", "d", "--", "-y"], "run needs a SCRIPT"),
        (["optimize", "-y"], "optimize needs a SCRIPT (or -m MODULE); try: gpuopt optimize"),
        (["optimize", "--nproc-per-node", "2"], "optimize runs one process so far"),
    ],
)
def test_a_command_without_its_script_is_one_line(argv: list[str], message: str) -> None:
    r = runner.invoke(app, argv)
    assert r.exit_code == 2 and message in r.output and len(r.output.strip().splitlines()) == 1
