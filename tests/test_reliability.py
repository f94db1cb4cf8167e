"""The run directory's promises (docs/reliability.md), each broken on purpose.

Whatever happens to the run or the disk, ``profile.json`` is a whole, valid document or the
command says in one line why there is none, exits 2, and shows no traceback.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, SCRIPTS, run_gpuopt

from gpuopt.commands.profile import run_profile
from gpuopt.errors import GpuoptError
from gpuopt.model.document import load_profile
from gpuopt.paths import default_run_dir
from gpuopt.probes.samplers import UtilizationSampler
from gpuopt.runner import run_dir as run_dir_module
from gpuopt.runner.options import ProfileOptions
from gpuopt.runner.run_dir import RunDirectory
from gpuopt.runner.session import CHECKPOINT_S, CHECKPOINT_SHARE, CheckpointSchedule

STEPS = """\
import torch

model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def step():
    opt.zero_grad()
    model(torch.ones(1, 2)).sum().backward()
    opt.step()


"""


def _doc(out: Path) -> dict[str, Any]:
    return json.loads((out / "profile.json").read_text())


def _script(tmp_path: Path, body: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(STEPS + body)
    return path


def _one_line_error(stderr: str, *needles: str) -> None:
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("gpuopt: error:")]
    assert len(errors) == 1, stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


# -- a reused directory, concurrent runs -------------------------------------------------------
def test_reused_directory_is_refused_then_replaced_with_force(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = run_gpuopt("profile", "--quiet", "-o", str(out), str(SCRIPTS / "exit_code.py"), "0")
    assert first.returncode == 0, first.stderr
    (out / "notes.txt").write_text("mine")
    before = (out / "profile.json").read_bytes()

    again = run_gpuopt("profile", "--quiet", "-o", str(out), str(SCRIPTS / "exit_code.py"), "5")
    assert again.returncode == 2
    _one_line_error(again.stderr, "already holds a profile", "--force")
    assert (out / "profile.json").read_bytes() == before

    forced = run_gpuopt(
        "profile", "--quiet", "--force", "-o", str(out), str(SCRIPTS / "exit_code.py"), "5"
    )
    assert forced.returncode == 5, forced.stderr
    assert "replacing the earlier run's profile" in forced.stderr
    assert _doc(out)["exit_code"] == 5 and _doc(out)["argv"] == ["5"]
    assert (out / "notes.txt").read_text() == "mine"  # not gpuopt's: left alone


def test_an_earlier_torchrun_jobs_ranks_count_as_an_earlier_run(tmp_path: Path) -> None:
    rank = tmp_path / "rank-0"
    rank.mkdir()
    (rank / "profile.json").write_text("{}")
    (tmp_path / "data").mkdir()
    with pytest.raises(GpuoptError, match="already holds a profile"):
        RunDirectory.prepare(tmp_path)
    RunDirectory.prepare(tmp_path, force=True)
    assert not rank.exists() and (tmp_path / "data").is_dir()


def test_two_runs_started_into_one_directory_the_second_is_refused(tmp_path: Path) -> None:
    a, b = RunDirectory.prepare(tmp_path), RunDirectory.prepare(tmp_path)  # both before a claim
    a.claim("a.py", [])
    with pytest.raises(GpuoptError, match="another gpuopt run started writing here"):
        b.claim("b.py", [])
    assert load_profile(tmp_path).script == "a.py"


def test_default_directories_of_runs_started_in_one_second_are_distinct(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    now = dt.datetime(2026, 11, 23, 12, 0, 0)
    made = [default_run_dir("train", now) for _ in range(3)]
    assert [p.name for p in made] == [
        "train-20261123-120000",
        "train-20261123-120000-2",
        "train-20261123-120000-3",
    ]
    assert all(p.is_dir() for p in made)


def test_two_optimize_runs_started_in_one_second_get_a_folder_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without -o, optimize's folder comes from the same function as profile's: the second run
    of the second takes ``-2`` instead of failing "another gpuopt run started writing here;
    pick another -o DIR" (the user gave no -o)."""
    from gpuopt.commands.optimize import OptimizeOptions, _out_dir

    monkeypatch.chdir(tmp_path)
    now = dt.datetime(2026, 11, 23, 12, 0, 0)
    opts = OptimizeOptions(script="train.py", module=None, args=[], out=None)
    first, second = _out_dir(opts, "train", now), _out_dir(opts, "train", now)
    assert str(first) == "gpuopt-runs/train-optimize-20261123-120000"
    assert str(second) == "gpuopt-runs/train-optimize-20261123-120000-2"
    assert first.is_dir() and second.is_dir()


# -- the disk refuses --------------------------------------------------------------------------
def _profile_in_process(
    script: Path, out: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    opts = ProfileOptions(script=str(script), module=None, args=[], out=out, window=0)
    with pytest.raises(SystemExit) as ei:
        run_profile(opts)
    captured = capsys.readouterr()
    code = ei.value.code
    assert isinstance(code, int)
    return code, captured.out, captured.err


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EACCES, errno.EROFS])
def test_a_failed_final_write_still_shows_the_report_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], err: int
) -> None:
    """(We run as root, so permissions cannot be taken away for real: the write is made to fail
    as the OS would fail it.) The placeholder went in; the final document could not."""
    real = run_dir_module.write_atomic

    def refusing(path: Path, data: bytes, replace: bool = True) -> None:
        if replace:
            raise OSError(err, os.strerror(err), str(path))
        real(path, data, replace)

    monkeypatch.setattr(run_dir_module, "write_atomic", refusing)
    script = _script(tmp_path, "for _ in range(3):\n    step()\n")
    code, out, errs = _profile_in_process(script, tmp_path / "run", capsys)
    assert code == 2
    _one_line_error(errs, "profile.json: cannot write the profile", os.strerror(err))
    assert "3 total" in out  # the report was still printed
    assert load_profile(tmp_path / "run").status == "interrupted"  # the valid placeholder


def test_a_disk_that_refuses_from_the_start_runs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def full(path: Path, data: bytes, replace: bool = True) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(run_dir_module, "write_atomic", full)
    marker = tmp_path / "ran"
    script = _script(tmp_path, f"open({str(marker)!r}, 'w').close()\n")
    code, _, errs = _profile_in_process(script, tmp_path / "run", capsys)
    assert code == 2
    _one_line_error(errs, "No space left on device")
    assert not marker.exists()


@pytest.mark.parametrize("make", ["file", "under_file"])
def test_an_out_dir_that_cannot_be_a_directory_is_one_line(tmp_path: Path, make: str) -> None:
    blocker = tmp_path / "taken"
    blocker.write_text("x")
    out = blocker if make == "file" else blocker / "run"
    r = run_gpuopt("profile", "--quiet", "-o", str(out), str(SCRIPTS / "exit_code.py"), "0")
    assert r.returncode == 2
    _one_line_error(r.stderr, str(out))


def test_a_reader_that_goes_away_does_not_cost_the_run(tmp_path: Path) -> None:
    """``gpuopt profile train.py | head -1``: the report meets a closed pipe (EPIPE); the
    profile is written and the exit code stays the script's."""
    script = _script(tmp_path, "for _ in range(4):\n    step()\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuopt", "profile", "-o", str(tmp_path / "run"), str(script)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first byte
    errs = proc.stderr.read()
    assert proc.wait(timeout=120) == 0, errs
    assert "Traceback" not in errs and "profile written to" in errs
    assert _doc(tmp_path / "run")["steps"]["count"] == 4


def _mount_tmpfs(where: Path, size: str) -> None:
    where.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {r.stderr.strip()}")


def test_a_real_full_disk_and_a_real_read_only_one(tmp_path: Path) -> None:
    """The same faults for real where a tmpfs can be mounted (root on Linux): 64 KiB hold the
    placeholder but not the final document; then the file system is made read-only."""
    small = tmp_path / "small"
    _mount_tmpfs(small, "64k")
    try:
        filler = small / "filler"
        filler.write_bytes(b"\0" * (64 * 1024))  # fill, then give back just enough
        with pytest.raises(OSError):
            (small / "more").write_bytes(b"\0" * 4096)
        filler.write_bytes(b"\0" * (56 * 1024))
        script = _script(tmp_path, "for _ in range(4):\n    step()\n")
        r = run_gpuopt("profile", "-o", str(small / "run"), str(script))
        assert r.returncode == 2
        _one_line_error(r.stderr, "cannot write the profile: No space left on device")
        assert "4 total" in r.stdout  # the report still shows
        subprocess.run(["mount", "-o", "remount,ro", str(small)], check=True)
        RunDirectory(tmp_path / "ok").write_profile(load_profile(small / "run"))
        r = run_gpuopt("report", str(tmp_path / "ok"), "-o", str(small / "r.html"))
        assert r.returncode == 2
        _one_line_error(r.stderr, "cannot write the report: Read-only file system")
    finally:
        subprocess.run(["umount", str(small)], check=False)


# -- the script does what scripts do -----------------------------------------------------------
@pytest.mark.parametrize("out", [["-o", "run"], []], ids=["relative -o", "default directory"])
def test_a_script_that_changes_directory_writes_where_the_run_started(
    tmp_path: Path, out: list[str]
) -> None:
    (tmp_path / "elsewhere").mkdir()
    script = _script(tmp_path, "import os\nstep()\nos.chdir('elsewhere')\nstep()\n")
    r = run_gpuopt("profile", "--quiet", *out, str(script), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    written = [p.parent for p in tmp_path.rglob("profile.json")]
    assert len(written) == 1 and _doc(written[0])["steps"]["count"] == 2
    assert written[0].parent == tmp_path if out else written[0].parent == tmp_path / "gpuopt-runs"
    assert f"profile written to {'run' if out else 'gpuopt-runs/train-'}" in r.stderr


def test_a_forked_child_never_writes_or_reports(tmp_path: Path) -> None:
    """The child carries a copy of gpuopt; ending through it (sys.exit) it keeps its own exit
    code and leaves the parent's document alone."""
    script = _script(
        tmp_path,
        "import os, sys\n"
        "for _ in range(3):\n    step()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    for _ in range(5):\n        step()\n"
        "    sys.exit(3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print('child exit', os.waitstatus_to_exitcode(status), flush=True)\n"
        "step()\n",
    )
    r = run_gpuopt("profile", "-o", str(tmp_path / "run"), str(script))
    assert r.returncode == 0, r.stderr
    assert "child exit 3" in r.stdout
    assert r.stderr.count("profile written to") == 1
    doc = _doc(tmp_path / "run")
    assert doc["status"] == "ok" and doc["steps"]["count"] == 4


def test_os_exit_still_writes_the_profile_with_its_code(tmp_path: Path) -> None:
    script = _script(tmp_path, "import os\nfor _ in range(4):\n    step()\nos._exit(3)\n")
    r = run_gpuopt("profile", "--quiet", "-o", str(tmp_path / "run"), str(script))
    assert r.returncode == 3, r.stderr
    doc = _doc(tmp_path / "run")
    assert doc["status"] == "error" and doc["exit_code"] == 3
    assert doc["error"]["type"] == "os._exit" and doc["steps"]["count"] == 4


def test_a_run_killed_outright_leaves_its_last_checkpoint(tmp_path: Path) -> None:
    """SIGKILL (or the OOM killer) runs nothing of ours: what is on disk is the last checkpoint,
    a whole document with the steps so far."""
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "gpuopt", "profile", "--quiet", "--window", "0"),
            *("-o", str(out), str(SCRIPTS / "forever.py")),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            doc = _doc(out) if (out / "profile.json").exists() else {}
            if doc.get("steps", {}).get("count", 0) > 0:
                break
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.2)
        else:
            pytest.fail("no checkpoint with steps within 120 s")
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    profile = load_profile(out)  # whole and valid
    assert profile.status == "interrupted" and profile.exit_code == 137
    assert profile.steps.count > 0
    assert any("killed outright" in w for w in profile.warnings)


def test_ctrl_c_while_gpuopt_starts_leaves_an_interrupted_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(self: UtilizationSampler, *args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(UtilizationSampler, "start", interrupted)
    marker = tmp_path / "ran"
    script = _script(tmp_path, f"open({str(marker)!r}, 'w').close()\n")
    code, _, errs = _profile_in_process(script, tmp_path / "run", capsys)
    assert code == 130, errs
    assert not marker.exists()
    profile = load_profile(tmp_path / "run")
    assert profile.status == "interrupted" and profile.exit_code == 130


def test_the_script_sees_what_python_shows_it(tmp_path: Path) -> None:
    """``sys.argv`` (argv[0] as typed), ``__file__``, ``__name__``, ``sys.path[0]``, and no
    ``from __future__`` flag of gpuopt's own leaking into the script's compilation."""
    script = tmp_path / "show.py"
    script.write_text(
        "import json, sys\n"
        "def f(x: int): pass\n"
        "print(json.dumps({'argv': sys.argv, 'file': __file__, 'name': __name__,\n"
        "    'path0': sys.path[0], 'spec': __spec__, 'package': __package__,\n"
        "    'annotation': repr(f.__annotations__['x']),\n"
        "    'main': sys.modules['__main__'].__dict__ is globals()}))\n"
    )
    python = subprocess.run(
        [sys.executable, "show.py", "a", "--b"], cwd=tmp_path, capture_output=True, text=True
    )
    assert python.returncode == 0, python.stderr
    ours = run_gpuopt("profile", "--quiet", "-o", "run", "show.py", "a", "--b", cwd=tmp_path)
    assert ours.returncode == 0, ours.stderr
    assert json.loads(ours.stdout) == json.loads(python.stdout)


def test_checkpoints_take_at_most_their_share_of_a_long_run() -> None:
    """A checkpoint's cost grows with the steps so far: the wait to the next one grows with it,
    so writing never takes more than CHECKPOINT_SHARE of the run (but never comes sooner than
    CHECKPOINT_S, nor without a new step)."""
    s = CheckpointSchedule()
    assert not s.due(1.9, 5) and s.due(2.0, 5)
    s.written(2.0, 2.001, 5)  # a small profile: 1 ms
    assert s.every == CHECKPOINT_S and not s.due(10.0, 5) and s.due(4.0, 6)
    s.written(4.0, 4.2, 900_000)  # 0.2 s to write a long run's profile
    assert s.every == pytest.approx(0.2 / CHECKPOINT_SHARE)
    assert not s.due(4.0 + 19.9, 900_001) and s.due(24.01, 900_001)
    # simulated: a write costs 2 µs per step so far (as measured), 10,000 steps a second, for
    # an hour; at every write, the writes before it took at most their share of the time
    s, now, spent, writes = CheckpointSchedule(), 0.0, 0.0, 0
    while now < 3600:
        now += 0.05  # the sampler's tick
        steps = int(now * 10_000)
        if s.due(now, steps):
            assert spent <= CHECKPOINT_SHARE * now
            cost = steps * 2e-6
            s.written(now, now + cost, steps)
            spent, writes = spent + cost, writes + 1
    assert writes >= 5  # 2 s apart at first, then further apart as the profile grows
