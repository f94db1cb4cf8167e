"""Every output and every input of every command (docs/reliability.md), broken on purpose.

What is not a regular file is never renamed over (a device stays a device, a FIFO a FIFO) and
never read (a FIFO nobody writes would block forever); an output is never one of the command's
own inputs, by any spelling; a path gpuopt cannot use is one line and exit 2, before any work.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import ROOT
from gate_support import noisy, run, write
from trace_helpers import cpu, write_trace
from typer.testing import CliRunner

from gpuopt.commands.cli import app
from gpuopt.errors import GpuoptError
from gpuopt.paths import check_output, write_output

runner = CliRunner()
COMMANDS = ["report", "report --format json", "compare", "check --junit", "schedule -o"]


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path]:
    base = write(tmp_path / "base.json", run(noisy(0.100, spread=0.005, seed=1)))
    cand = write(tmp_path / "cand.json", run(noisy(0.100, spread=0.005, seed=2)))
    return base, cand


MODEL = """\
import torch


def make():
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()), (torch.randn(2, 4),)
"""


def _argv(command: str, base: Path, cand: Path, out: Path) -> list[str]:
    if command == "schedule -o":
        model = base.parent / "tiny_model.py"
        model.write_text(MODEL)
        return ["schedule", f"{model}:make", "-o", str(out)]
    return {
        "report": ["report", str(cand), "-o", str(out)],
        "report --format json": ["report", "--format", "json", str(cand), "-o", str(out)],
        "compare": ["compare", str(base), str(cand), "-o", str(out), "--format", "md"],
        "check --junit": ["check", str(cand), "--baseline", str(base), "--junit", str(out)],
    }[command]


def _one_line(output: str, *needles: str) -> None:
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuopt: error: "), output
    assert "Traceback" not in output
    for needle in needles:
        assert needle in lines[0], output


# -- outputs that are not regular files: a plain write, never a rename --------------------------
def _fifo_reader(path: Path) -> tuple[threading.Thread, list[bytes]]:
    got: list[bytes] = []

    def read() -> None:
        with open(path, "rb") as fh:  # blocks until the command opens it for writing
            got.append(fh.read())

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t, got


@pytest.mark.parametrize("command", COMMANDS)
def test_an_output_fifo_is_written_into_and_stays_a_fifo(
    command: str, runs: tuple[Path, Path], tmp_path: Path
) -> None:
    base, cand = runs
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader, got = _fifo_reader(fifo)
    r = runner.invoke(app, _argv(command, base, cand, fifo))
    reader.join(timeout=30)
    assert r.exit_code in (0, 1), r.output  # check: pass or regression, both wrote the XML
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # not replaced by a regular file
    assert got and len(got[0]) > 100


@pytest.mark.parametrize("command", COMMANDS)
def test_an_output_device_stays_a_device(
    command: str, runs: tuple[Path, Path], tmp_path: Path
) -> None:
    """``-o /dev/null`` replaced /dev/null with a regular file (as root, every program on the
    machine then broke). Tested on a null device of our own, so that a regression breaks only
    this test's folder."""
    base, cand = runs
    null = tmp_path / "null"
    try:
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs CAP_MKNOD (the FIFO and /dev/fd tests still run)")
    r = runner.invoke(app, _argv(command, base, cand, null))
    assert r.exit_code in (0, 1), r.output
    st = os.lstat(null)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)


@pytest.mark.parametrize("command", COMMANDS)
def test_an_open_descriptor_path_gets_the_output(
    command: str, runs: tuple[Path, Path], tmp_path: Path
) -> None:
    """``-o /dev/fd/N`` (bash's ``>(...)``, ``/dev/stdout``): written through, not renamed."""
    base, cand = runs
    r_fd, w_fd = os.pipe()
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(_read_all(r_fd)), daemon=True)
    reader.start()
    try:
        r = runner.invoke(app, _argv(command, base, cand, Path(f"/dev/fd/{w_fd}")))
    finally:
        os.close(w_fd)
    reader.join(timeout=30)
    assert r.exit_code in (0, 1), r.output
    assert got and len(got[0]) > 100


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


# -- an output is never an input ---------------------------------------------------------------
def test_check_never_writes_its_junit_over_its_own_inputs(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    base, cand = runs
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "profile.json").write_bytes(cand.read_bytes())
    config = tmp_path / "gate.toml"
    config.write_text('max-step-time-regression = "50%"\n')
    os.link(cand, tmp_path / "hard.json")
    os.symlink(base, tmp_path / "link.json")
    before = {p: p.read_bytes() for p in (base, cand, run_dir / "profile.json", config)}
    cases = [
        ([str(cand)], cand),  # the candidate itself
        ([str(cand)], base),  # the baseline
        ([str(cand)], tmp_path / "." / "cand.json"),  # spelt apart
        ([str(cand)], tmp_path / "hard.json"),  # a hard link of the candidate
        ([str(cand)], tmp_path / "link.json"),  # a symbolic link to the baseline
        ([str(run_dir)], run_dir / "profile.json"),  # the run directory's own document
        ([str(cand)], config),  # the settings file read
    ]
    for candidate, junit in cases:
        argv = ["check", *candidate, "--baseline", str(base), "--config", str(config)]
        r = runner.invoke(app, [*argv, "--junit", str(junit)])
        assert r.exit_code == 2, (junit, r.output)
        _one_line(r.output, "is an input of this command", "--junit")
    assert {p: p.read_bytes() for p in before} == before


def test_compare_and_the_step_summary_never_write_over_an_input(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    base, cand = runs
    config = tmp_path / "gate.toml"
    config.write_text('step-time-noise = "2%"\n')
    before = config.read_bytes(), cand.read_bytes()
    r = runner.invoke(
        app, ["compare", str(base), str(cand), "--config", str(config), "-o", str(config)]
    )
    assert r.exit_code == 2
    _one_line(r.output, "is an input of this command")
    r = runner.invoke(
        app, ["check", str(cand), "--baseline", str(base)], env={"GITHUB_STEP_SUMMARY": str(cand)}
    )
    assert r.exit_code == 0, r.output
    assert "not appended to GITHUB_STEP_SUMMARY" in r.output
    assert (config.read_bytes(), cand.read_bytes()) == before


def test_schedule_never_writes_its_plan_over_the_models_module(tmp_path: Path) -> None:
    model = tmp_path / "tiny_model.py"
    model.write_text(MODEL)
    r = runner.invoke(app, ["schedule", f"{model}:make", "-o", str(model)])
    assert r.exit_code == 2
    _one_line(r.output, "is an input of this command")
    assert model.read_text() == MODEL


# -- regular outputs: whole, their mode and links kept, read-only refused -----------------------
def test_a_replaced_file_keeps_its_mode_and_a_link_stays_a_link(tmp_path: Path) -> None:
    mine = tmp_path / "mine.html"
    mine.write_text("old")
    os.chmod(mine, 0o640)
    write_output(mine, b"new")
    assert mine.read_bytes() == b"new" and stat.S_IMODE(mine.stat().st_mode) == 0o640
    link = tmp_path / "latest.html"
    link.symlink_to(mine)
    write_output(link, b"newer")
    assert link.is_symlink() and mine.read_bytes() == b"newer"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.html", "mine.html"]  # no temp


def test_a_read_only_output_is_refused_whoever_runs_gpuopt(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    base, cand = runs
    kept = tmp_path / "kept.html"
    kept.write_text("do not touch")
    os.chmod(kept, 0o444)
    r = runner.invoke(app, ["report", str(cand), "-o", str(kept)])
    assert r.exit_code == 2
    _one_line(r.output, "read-only (mode 0444)")
    assert kept.read_text() == "do not touch"


def test_a_long_name_is_written_and_one_too_long_refused_before_the_work(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    """The temporary file beside a 250-byte name was longer than the name (refused by the file
    system though the name itself was fine); a 300-byte name was a pathlib traceback."""
    base, cand = runs
    fine = tmp_path / ("a" * 250)
    r = runner.invoke(app, ["report", str(cand), "-o", str(fine)])
    assert r.exit_code == 0 and fine.stat().st_size > 100, r.output
    r = runner.invoke(app, ["report", str(tmp_path / "missing"), "-o", str(tmp_path / ("b" * 300))])
    assert r.exit_code == 2
    _one_line(r.output, "a name of 300 bytes")


@pytest.mark.parametrize(
    "argv",
    [
        ["profile", "-o", "", "train.py"],
        ["profile", "--out=", "train.py"],
        ["optimize", "-o", "", "train.py"],
        ["report", ""],
        ["report", "cand.json", "-o", ""],
        ["report", "cand.json", "--output="],
        ["compare", "base.json", "cand.json", "-o", ""],
        ["check", "cand.json", "--baseline", "base.json", "--junit", ""],
        ["check", "cand.json", "--baseline", ""],
        ["check", "cand.json", "--baseline", "base.json", "--config", ""],
        ["run", "--fixes", "", "train.py"],
        ["schedule", "m.py:make", "-o", ""],
        ["profile", "--fixes", "", "train.py"],
    ],
    ids=lambda a: " ".join(repr(x) if not x else x for x in a),
)
def test_an_empty_path_is_refused_not_taken_for_the_working_directory(
    argv: list[str], runs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Path('')`` is ``.``: ``profile -o ''`` wrote its run into the working directory."""
    folder = runs[0].parent
    (folder / "train.py").write_text("print('ran')\n")
    monkeypatch.chdir(folder)
    before = sorted(p.name for p in folder.iterdir())
    r = runner.invoke(app, argv)
    assert r.exit_code == 2, r.output
    _one_line(r.output, "''")
    assert sorted(p.name for p in folder.iterdir()) == before


def test_check_output_refuses_what_cannot_be_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    for out, needle in [
        (tmp_path, "is a directory"),
        (tmp_path / "file" / "r.xml", "is not a directory"),
        (Path("."), "name a file"),
    ]:
        with pytest.raises(GpuoptError, match=needle):
            check_output(out, [])


# -- stdout ------------------------------------------------------------------------------------
@pytest.mark.parametrize("shell", ["> /dev/full", ">&-"])
def test_a_stdout_that_fails_or_is_closed_is_one_line(
    shell: str, runs: tuple[Path, Path], tmp_path: Path
) -> None:
    base, cand = runs
    for argv in (f"report {cand}", f"check {cand} --baseline {base}"):
        r = subprocess.run(
            f"{sys.executable} -m gpuopt {argv} {shell}",
            shell=True,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert r.returncode == 2, (argv, r.stderr)
        _one_line(r.stderr, "cannot write to stdout")


# -- inputs that are not regular files: refused before they are read ----------------------------
def _unblocker(fifo: Path) -> Iterator[None]:
    """If gpuopt reads the FIFO (the bug), a writer opens it after a while so the test fails
    instead of hanging."""
    stop = threading.Event()

    def unblock() -> None:
        if not stop.wait(20):
            with open(fifo, "wb"):
                pass

    t = threading.Thread(target=unblock, daemon=True)
    t.start()
    yield
    stop.set()


@pytest.mark.parametrize(
    "make_argv",
    [
        lambda f, b: ["report", str(f)],
        lambda f, b: ["report", str(b), str(f)],
        lambda f, b: ["check", str(f), "--baseline", str(b)],
        lambda f, b: ["compare", str(b), str(f)],
        lambda f, b: ["report", str(f), "--summary-only", "-o", str(b.parent / "sums")],
    ],
    ids=["report", "report A FIFO", "check", "compare", "report --summary-only"],
)
def test_a_fifo_or_device_input_is_refused_without_reading_it(
    make_argv: Callable[[Path, Path], list[str]], runs: tuple[Path, Path], tmp_path: Path
) -> None:
    base, _ = runs
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    for _ in _unblocker(fifo):
        r = runner.invoke(app, make_argv(fifo, base))
    assert r.exit_code == 2
    _one_line(r.output, "is a FIFO (named pipe), not a file gpuopt can read")
    r = runner.invoke(app, ["report", "/dev/zero"])
    assert r.exit_code == 2
    _one_line(r.output, "is a character device")
    r = runner.invoke(app, ["check", str(base), "--baseline", str(base), "--config", "/dev/null"])
    assert r.exit_code == 2
    _one_line(r.output, "--config /dev/null: is a character device")


def test_fixes_and_baseline_fifos_are_refused(tmp_path: Path) -> None:
    fixes = tmp_path / "fixes"
    fixes.mkdir()
    os.mkfifo(fixes / "fixes.json")
    (tmp_path / "train.py").write_text("print('ran')\n")
    for _ in _unblocker(fixes / "fixes.json"):
        r = runner.invoke(app, ["run", "--fixes", str(fixes), str(tmp_path / "train.py")])
    assert r.exit_code == 2
    _one_line(r.output, "is a FIFO")


# -- a folder of traces with other files in it -------------------------------------------------
def _rank(rank: int) -> list[dict[str, object]]:
    return [
        cpu(f"ProfilerStep#{s + 1}", 10_000.0 * s, 9_000, cat="user_annotation") for s in range(3)
    ] + [cpu("aten::addmm", 10_000.0 * s + 10, 5_000) for s in range(3)]


def test_a_folder_of_traces_skips_what_is_not_a_trace_with_a_note_each(tmp_path: Path) -> None:
    """TraceLens writes execution_details.json beside its traces: the folder was refused whole."""
    job = tmp_path / "job"
    job.mkdir()
    write_trace(job / "rank0.json", _rank(0), 0)
    write_trace(job / "rank1.json", _rank(1), 1)
    (job / "execution_details.json").write_text('{"kernels": [{"name": "gemm"}]}')
    (job / "events.json").write_text("[1, 2, 3]")
    r = runner.invoke(app, ["report", str(job), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert "execution_details.json: skipped: no 'traceEvents'" in r.output
    assert "events.json: skipped: a JSON array" in r.output
    # a damaged trace is still refused: only other documents are skipped
    (job / "rank2.json").write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1,')
    r = runner.invoke(app, ["report", str(job)])
    assert r.exit_code == 2 and "rank2.json" in r.output, r.output
    # and a folder of nothing but other documents is refused
    for name in ("rank0.json", "rank1.json", "rank2.json"):
        (job / name).unlink()
    r = runner.invoke(app, ["report", str(job)])
    assert r.exit_code == 2
    _one_line(r.output, "none of its 2 .json files is a PyTorch profiler trace")


@pytest.mark.parametrize(
    ("command", "name"), [("profile", "profile.json"), ("optimize", "optimize.json")]
)
def test_a_run_directory_never_writes_over_the_script_even_with_force(
    command: str, name: str, tmp_path: Path
) -> None:
    """A script named like a file the run writes, in the run directory: refused, --force or not
    (``profile --force`` removed it as an earlier run's profile)."""
    script = tmp_path / name
    script.write_text("print('the script')\n")
    r = runner.invoke(app, [command, "--force", "-o", str(tmp_path), str(script)])
    assert r.exit_code == 2, r.output
    _one_line(r.output, "is an input of this command")
    assert script.read_text() == "print('the script')\n"


def test_dash_is_stdout_for_a_report_and_refused_where_stdout_is_taken(
    runs: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, cand = runs
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["report", str(cand), "-o", "-", "--format", "json"])
    assert r.exit_code == 0 and r.stdout.lstrip().startswith("{"), r.output
    r = runner.invoke(app, ["compare", str(base), str(cand), "-o", "-"])
    assert r.exit_code == 0 and r.stdout, r.output
    r = runner.invoke(app, ["check", str(cand), "--baseline", str(base), "--junit", "-"])
    assert r.exit_code == 2
    _one_line(r.output, "--junit -: stdout is not taken here")
    assert not (tmp_path / "-").exists()  # never a file named '-'


def test_a_script_whose_name_is_not_utf8_keeps_its_profile(tmp_path: Path) -> None:
    """JSON is UTF-8: msgspec refused the name (a traceback, the placeholder left)."""
    name = b"t\xff.py"
    (tmp_path / os.fsdecode(name)).write_text(
        "import gpuopt\nfor _ in range(3):\n    gpuopt.step()\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "gpuopt", "profile", "--quiet", "-o", "run", os.fsdecode(name)],
        cwd=tmp_path,
        capture_output=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0, r.stderr
    assert b"Traceback" not in r.stderr
    doc = (tmp_path / "run" / "profile.json").read_text(encoding="utf-8")
    assert '"script": "t\\\\xff.py"' in doc and '"count": 3' in doc
    r = runner.invoke(app, ["report", str(tmp_path / "run"), "-o", str(tmp_path / "r.md")])
    assert r.exit_code == 0 and "xff.py" in (tmp_path / "r.md").read_text(encoding="utf-8")


def test_a_report_written_into_the_run_directory_can_be_written_again(tmp_path: Path) -> None:
    """Only what reading the directory reads is an input: its profile.json, not report.json."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write(run_dir / "profile.json", run(noisy(0.1)))
    for _ in range(2):
        r = runner.invoke(app, ["report", str(run_dir), "-o", str(run_dir / "report.json")])
        assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["report", str(run_dir), "-o", str(run_dir / "profile.json")])
    assert r.exit_code == 2
    _one_line(r.output, "is an input of this command", "read in")
