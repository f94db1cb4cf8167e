"""`gpuopt profile` as a user runs it: subprocesses of `python -m gpuopt`, real scripts."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SCRIPTS, run_gpuopt

from gpuopt.findings.rules.dataloader import THRESHOLD as DATALOADER_THRESHOLD


def _profile(out: Path) -> dict:
    return json.loads((out / "profile.json").read_text())


def test_exit_code_is_the_scripts_and_profile_says_error(tmp_path: Path) -> None:
    r = run_gpuopt("profile", "--quiet", "-o", str(tmp_path), str(SCRIPTS / "exit_code.py"), "7")
    assert r.returncode == 7, r.stderr
    doc = _profile(tmp_path)
    assert doc["status"] == "error" and doc["exit_code"] == 7
    assert doc["steps"]["count"] == 4


def test_exit_with_a_bool_is_an_int_exit_code(tmp_path: Path) -> None:
    """sys.exit(True) exits 1, as under python; the document says 1 (an int) and reads back."""
    script = tmp_path / "bool_exit.py"
    script.write_text("import sys\nsys.exit(True)\n")
    r = run_gpuopt("profile", "--quiet", "-o", str(tmp_path / "run"), str(script))
    assert r.returncode == 1, r.stderr
    assert _profile(tmp_path / "run")["exit_code"] == 1
    again = run_gpuopt("report", str(tmp_path / "run"), "--format", "json")
    assert again.returncode == 0 and '"exit_code": 1,' in again.stdout


def test_exit_zero_is_ok(tmp_path: Path) -> None:
    r = run_gpuopt("profile", "--quiet", "-o", str(tmp_path), str(SCRIPTS / "exit_code.py"), "0")
    assert r.returncode == 0, r.stderr
    assert _profile(tmp_path)["status"] == "ok"


def test_uncaught_exception_prints_the_scripts_traceback_only(tmp_path: Path) -> None:
    r = run_gpuopt("profile", "--quiet", "-o", str(tmp_path), str(SCRIPTS / "raises.py"))
    assert r.returncode == 1
    assert "Traceback (most recent call last)" in r.stderr
    assert 'raises.py", line 5, in broken_step' in r.stderr
    assert "ValueError: planted failure after 5 steps" in r.stderr
    assert "gpuopt/script" not in r.stderr and "gpuopt/runner" not in r.stderr
    assert "runpy" not in r.stderr
    doc = _profile(tmp_path)
    assert doc["status"] == "error" and doc["exit_code"] == 1
    assert doc["error"] == {"type": "ValueError", "message": "planted failure after 5 steps"}
    assert doc["steps"]["count"] == 5


def test_steps_stops_a_long_run_cleanly(tmp_path: Path) -> None:
    r = run_gpuopt(
        "profile", "--quiet", "--steps", "6", "-o", str(tmp_path), str(SCRIPTS / "forever.py")
    )
    assert r.returncode == 0, r.stderr
    doc = _profile(tmp_path)
    assert doc["status"] == "ok" and doc["stopped_by_steps"] is True
    assert doc["steps"]["count"] == 6
    # warm-up (0, 1) and the recorder's window (2, 3, 4) are left out of the statistics
    assert doc["steps"]["instrumented"] == [2, 3, 4]
    assert doc["steps"]["measured"] == 1
    assert [r["instrumented"] for r in doc["steps"]["series"]] == [
        False,
        False,
        True,
        True,
        True,
        False,
    ]


@pytest.mark.parametrize(
    "mode,returncode,exit_code,error",
    [("sigterm", -signal.SIGTERM, 143, "SIGTERM"), ("sigint", 130, 130, "KeyboardInterrupt")],
)
def test_signal_writes_interrupted_profile(
    tmp_path: Path, mode: str, returncode: int, exit_code: int, error: str
) -> None:
    """Ctrl-C ends with 130 as python does; SIGTERM, once the profile is written, is delivered
    again so the process dies of it as it would without gpuopt (a shell's $? is 143)."""
    r = run_gpuopt("profile", "--quiet", "-o", str(tmp_path), str(SCRIPTS / "forever.py"), mode)
    assert r.returncode == returncode, r.stderr
    doc = _profile(tmp_path)
    assert doc["status"] == "interrupted" and doc["exit_code"] == exit_code
    assert doc["error"]["type"] == error
    assert doc["steps"]["count"] >= 3


def test_external_sigterm_while_running(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuopt",
            "profile",
            "--quiet",
            "-o",
            str(tmp_path),
            str(SCRIPTS / "forever.py"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "READY"
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGTERM
    doc = _profile(tmp_path)
    assert doc["status"] == "interrupted" and doc["exit_code"] == 143


def test_gpuopt_step_marks_steps_without_optimizer(tmp_path: Path) -> None:
    r = run_gpuopt(
        "profile", "--quiet", "--warmup", "1", "-o", str(tmp_path), str(SCRIPTS / "manual_steps.py")
    )
    assert r.returncode == 0, r.stderr
    doc = _profile(tmp_path)
    assert doc["steps"]["count"] == 7 and doc["steps"]["measured"] == 3  # warm-up 1, window 3
    assert doc["steps"]["marked_by"] == ["gpuopt.step"]
    assert "done" in r.stdout


def test_module_mode_runs_like_python_dash_m(tmp_path: Path) -> None:
    r = run_gpuopt(
        "profile", "--quiet", "-o", str(tmp_path), "-m", "pkg.trainmod", "5", "--flag", cwd=SCRIPTS
    )
    assert r.returncode == 0, r.stderr
    assert "argv ['5', '--flag']" in r.stdout
    doc = _profile(tmp_path)
    assert doc["script"] == "-m pkg.trainmod" and doc["steps"]["count"] == 5


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_dataloader_workers_fork_and_spawn(tmp_path: Path, method: str) -> None:
    r = run_gpuopt(
        "profile", "--quiet", "-o", str(tmp_path), str(SCRIPTS / "spawn_workers.py"), method
    )
    assert r.returncode == 0, r.stderr
    assert f"seen=24 method={method}" in r.stdout
    doc = _profile(tmp_path)
    assert doc["steps"]["count"] == 6
    (loader,) = doc["dataloaders"]
    assert loader["num_workers"] == 2 and loader["multiprocessing_context"] == method
    assert loader["batches"] == 6


def test_options_after_script_belong_to_the_script(tmp_path: Path) -> None:
    # --steps after the script is the script's argument, as with python
    r = run_gpuopt(
        "profile", "--quiet", "-o", str(tmp_path), str(SCRIPTS / "exit_code.py"), "--steps"
    )
    assert r.returncode == 1  # int("--steps") fails inside the script
    assert "ValueError" in r.stderr


@pytest.mark.parametrize(
    "args,needle",
    [
        (["profile", "no_such_script.py"], "no such file"),
        (["profile", str(SCRIPTS)], "is a directory"),
        (["profile", "--bogus", "x.py"], "unknown option"),
        (["profile", "-m", "no_such_module_xyz"], "no module named"),
        (["profile"], "needs a script"),
        (["report", "does/not/exist"], "no such file"),
    ],
)
def test_bad_input_one_line_exit_2(args: list[str], needle: str) -> None:
    r = run_gpuopt(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0].lower(), r.stderr


def test_planted_stall_data_wait_matches_ground_truth(tmp_path: Path) -> None:
    """gpuopt's data-wait share against the script's own measurement in the same run: how much
    of the step the stall takes depends on how busy the machine is, the agreement does not."""
    truth_file = tmp_path / "truth.json"
    out = tmp_path / "run"
    r = run_gpuopt(
        "profile", "--quiet", "-o", str(out), str(SCRIPTS / "planted_stall.py"), str(truth_file)
    )
    assert r.returncode == 0, r.stderr
    truth = json.loads(truth_file.read_text())
    doc = _profile(out)
    assert truth["stalled_min_s"] >= truth["stall_s"]  # the plant is real
    assert doc["steps"]["count"] == truth["steps"] == 60
    assert abs(doc["breakdown"]["data_wait"] - truth["data_wait"]) <= 0.03, (
        doc["breakdown"],
        truth,
    )
    ids = [f["id"] for f in doc["findings"]]
    # the rule follows the measurement (its threshold is tested on fixed numbers elsewhere)
    assert ("dataloader-bound" in ids) == (doc["breakdown"]["data_wait"] >= DATALOADER_THRESHOLD)


def test_nproc_per_node_launches_ranks_through_torchrun(tmp_path: Path) -> None:
    out = tmp_path / "ddp"
    r = run_gpuopt(
        "profile",
        "--quiet",
        "--nproc-per-node",
        "2",
        "-o",
        str(out),
        str(SCRIPTS / "ddp_gloo.py"),
        timeout=180,
    )
    assert r.returncode == 0, r.stderr
    assert "rank 0 of 2 done" in r.stdout and "rank 1 of 2 done" in r.stdout
    doc = _profile(out)
    assert doc["status"] == "ok"
    assert [(x["rank"], x["dir"], x["steps"]) for x in doc["ranks"]] == [
        (0, "rank-0", 8),
        (1, "rank-1", 8),
    ]
    for k in (0, 1):
        assert json.loads((out / f"rank-{k}" / "profile.json").read_text())["rank"] == k


HOLD = """\
import os, signal, sys
from gpuopt.script.held_sigterm import held_sigterm
from gpuopt.script.target import Target, run_target
with held_sigterm():
    os.kill(os.getpid(), signal.SIGTERM)
    outcome = run_target(Target(sys.argv[1], None, []))
    print(outcome.status, outcome.exit_code, outcome.error.type, flush=True)
print("not reached")
"""


def test_a_sigterm_outside_the_script_waits_for_the_profile(tmp_path: Path) -> None:
    """SIGTERM before the script starts or after it ended (torchrun's to every rank once one
    failed) ends the process only once gpuopt's block is done, and a script not yet started does
    not start."""
    script = tmp_path / "s.py"
    script.write_text("print('the script ran')\n")
    r = subprocess.run(
        [sys.executable, "-c", HOLD, str(script)], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == -signal.SIGTERM, r.stderr
    assert r.stdout == "interrupted 143 SIGTERM\n"
