"""A script that fails, exits or becomes another program in every way python allows still leaves
its profile (docs/reliability.md), and ends as ``python SCRIPT`` would: the same exit code, the
same traceback, nothing of gpuopt's added.

Each case runs the script twice, under plain python and under ``gpuopt profile``, and compares
what a user sees; the profile must hold the steps made before the end, and the exit code the
process really returned."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

from gpuopt.script.target import exit_outcome, exit_status
from gpuopt.sites import GPUOPT_DIR

STEPS = "import gpuopt\nfor _ in range(3):\n    gpuopt.step()\n"

CASES = {
    "an exception whose __str__ raises": (
        "class E(Exception):\n    def __str__(self):\n        raise RuntimeError('no str')\n"
        "raise E()\n"
    ),
    "a BaseException subclass": "class Stop(BaseException):\n    pass\nraise Stop('by hand')\n",
    "fd 2 closed, then an exception": "import os\nos.close(2)\nraise ValueError('quietly')\n",
    "sys.exit(256)": "import sys\nsys.exit(256)\n",
    "sys.exit(-1)": "import sys\nsys.exit(-1)\n",
    "sys.exit(2**32 + 3)": "import sys\nsys.exit(2**32 + 3)\n",
    "os._exit(300)": "import os\nos._exit(300)\n",
    "sys.stdout closed": "import sys\nsys.stdout.close()\n",
    "fd 1 closed": "import os\nprint('before', flush=True)\nos.close(1)\n",
    "exec of python": (
        "import os, sys\nos.execv(sys.executable, [sys.executable, '-c', "
        "'import sys; print(\"the new program\"); sys.exit(7)'])\n"
    ),
    "exec of echo (execvp)": "import os\nos.execvp('echo', ['echo', 'from echo'])\n",
}


def _python(script: Path, cwd: Path, shell: str = "") -> subprocess.CompletedProcess[str]:
    return _sh(f"{sys.executable} {script.name} {shell}", cwd)


def _gpuopt(script: str, cwd: Path, shell: str = "") -> subprocess.CompletedProcess[str]:
    return _sh(f"{sys.executable} -m gpuopt profile --window 0 -o run {script} {shell}", cwd)


def _sh(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        command, shell=True, cwd=cwd, capture_output=True, text=True, timeout=300, env=env
    )


def _ours(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("gpuopt:")]


def _theirs(stderr: str) -> str:
    return "\n".join(line for line in stderr.splitlines() if not line.startswith("gpuopt:"))


def _profile(cwd: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((cwd / "run" / "profile.json").read_text())
    return doc


@pytest.mark.parametrize("case", list(CASES))
def test_the_script_ends_as_under_python_and_its_profile_is_kept(case: str, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(STEPS + CASES[case])
    plain = _python(script, tmp_path)
    ours = _gpuopt("train.py", tmp_path)
    assert ours.returncode == plain.returncode, ours.stderr
    assert ours.stdout.startswith(plain.stdout), ours.stdout  # then the report, if any
    assert _theirs(ours.stderr) == _theirs(plain.stderr)  # the same traceback, and only it
    assert not any("Traceback" in line for line in _ours(ours.stderr))
    doc = _profile(tmp_path)
    assert doc["steps"]["count"] == 3, doc["status"]  # not the placeholder: 0 steps, 137
    if case.startswith("exec"):
        assert doc["status"] == "ok" and doc["error"]["type"] == "exec"
        # the program's code is the process's (7, 0): known to the parent only, never a wrong 0
        assert doc["exit_code"] is None and "exit_code null" in doc["error"]["message"]
    else:
        assert doc["exit_code"] == plain.returncode
        assert doc["status"] == ("ok" if plain.returncode == 0 else "error")


def test_a_failed_exec_goes_on_and_says_where_measuring_stopped(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        STEPS + "import os\ntry:\n    os.execv('/bin/true', [])\nexcept ValueError:\n    pass\n"
        "try:\n    os.execv('/nonexistent/prog', ['prog'])\n"
        "except OSError as e:\n    print('went on after', type(e).__name__)\n"
        "for _ in range(2):\n    gpuopt.step()\n"
    )
    r = _gpuopt("train.py", tmp_path)
    assert r.returncode == 0 and "went on after FileNotFoundError" in r.stdout, r.stderr
    doc = _profile(tmp_path)
    assert doc["status"] == "ok" and "error" not in doc
    assert any("os.execv failed (FileNotFoundError" in w for w in doc["warnings"])
    assert not any("ValueError" in w for w in doc["warnings"])  # refused before any exec
    assert doc["steps"]["count"] == 3  # measuring stopped at the exec that was tried


@pytest.mark.parametrize(("shell", "code"), [(">&-", 0), ("> /dev/full", 2)])
def test_gpuopt_started_without_a_usable_stdout(shell: str, code: int, tmp_path: Path) -> None:
    """``>&-``: python's stdout is None (an AttributeError); ``> /dev/full``: the report cannot
    be written (an OSError traceback). The profile is written either way."""
    (tmp_path / "train.py").write_text(STEPS)
    r = _gpuopt("train.py", tmp_path, shell)
    assert r.returncode == code, r.stderr
    assert "Traceback" not in r.stderr
    if code:
        assert (
            _ours(r.stderr)[-1] == "gpuopt: error: cannot write to stdout: No space left on device"
        )
    assert _profile(tmp_path)["steps"]["count"] == 3


def test_a_dataloader_workers_error_shows_no_gpuopt_frame(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\nfrom torch.utils.data import DataLoader, Dataset\n\n\n"
        "class D(Dataset):\n    def __len__(self):\n        return 8\n\n"
        "    def __getitem__(self, i):\n        if i == 5:\n"
        "            raise ValueError('bad item')\n"
        "        return torch.ones(2)\n\n\n"
        "for x in DataLoader(D(), batch_size=2, num_workers=1):\n    pass\n"
    )
    plain = _python(script, tmp_path)
    ours = _gpuopt("train.py", tmp_path)
    assert ours.returncode == plain.returncode == 1
    assert GPUOPT_DIR + os.sep not in _theirs(ours.stderr)  # the package's files, not the word
    assert _theirs(ours.stderr) == _theirs(plain.stderr)


@pytest.mark.parametrize("kind", ["directory", "zip archive"])
def test_a_directory_or_zip_with_main_runs_as_python_runs_it(kind: str, tmp_path: Path) -> None:
    main = (
        "import sys\nimport helper\nprint(sys.argv, sys.path[0], __file__, __name__, "
        "__spec__.name, repr(__package__), helper.X)\n" + STEPS
    )
    app = tmp_path / "app"
    app.mkdir()
    (app / "__main__.py").write_text(main)
    (app / "helper.py").write_text("X = 'helper'\n")
    target = "app"
    if kind == "zip archive":
        with zipfile.ZipFile(tmp_path / "app.zip", "w") as z:
            z.write(app / "__main__.py", "__main__.py")
            z.write(app / "helper.py", "helper.py")
        target = "app.zip"
    plain = _sh(f"{sys.executable} {target} a b", tmp_path)
    ours = _sh(f"{sys.executable} -m gpuopt profile --quiet -o run {target} a b", tmp_path)
    assert plain.returncode == ours.returncode == 0, ours.stderr
    assert ours.stdout == plain.stdout
    assert _profile(tmp_path)["steps"]["count"] == 3


@pytest.mark.parametrize(
    "code", [0, 1, 255, 256, -1, 300, 2**31, 2**32 + 3, 2**63 - 1, 2**63, 2**64, -(2**63) - 1]
)
def test_the_exit_code_recorded_is_the_one_the_process_returns(code: int) -> None:
    real = subprocess.run([sys.executable, "-c", f"import sys; sys.exit({code})"], timeout=60)
    assert exit_status(code) == real.returncode
    outcome = exit_outcome(code)
    assert outcome.exit_code == real.returncode
    assert outcome.status == ("ok" if real.returncode == 0 else "error")


def test_sys_exit_with_a_message_or_a_bool() -> None:
    assert exit_outcome(True).exit_code == 1 and exit_outcome(False).exit_code == 0
    assert exit_outcome(None).status == "ok"
    printed = exit_outcome("bye")
    assert (printed.status, printed.exit_code, printed.error and printed.error.message) == (
        "error",
        1,
        "bye",
    )


WORKER_DEATHS = {
    "sys.exit": "sys.exit(3)",
    "os._exit": "os._exit(3)",
    "segfault": "ctypes.string_at(0)",
    "abort": "os.abort()",
}


def _dying_worker(death: str, item: int) -> str:
    return (
        "import ctypes, os, sys\nimport torch\nfrom torch.utils.data import DataLoader, Dataset\n"
        "\n\nclass D(Dataset):\n    def __len__(self):\n        return 8\n\n"
        f"    def __getitem__(self, i):\n        if i == {item}:\n"
        f"            {WORKER_DEATHS[death]}\n        return torch.ones(2)\n\n\n"
        "for x in DataLoader(D(), batch_size=2, num_workers=1):\n    pass\n"
    )


def _pids_out(text: str) -> str:
    return re.sub(r"pid(\(s\))? \d+", "pid N", text)


@pytest.mark.parametrize("death", list(WORKER_DEATHS))
def test_a_dataloader_worker_that_dies_ends_the_run_as_under_python(
    death: str, tmp_path: Path
) -> None:
    """A worker that dies on its first item (no batch in flight: python's own output is then
    the same each time): the same exit code and the same lines, pids aside."""
    (tmp_path / "train.py").write_text(_dying_worker(death, 0))
    plain = _python(tmp_path / "train.py", tmp_path)
    ours = _gpuopt("train.py", tmp_path)
    assert ours.returncode == plain.returncode == 1, ours.stderr
    assert _pids_out(_theirs(ours.stderr)) == _pids_out(_theirs(plain.stderr))
    assert "DataLoader worker (pid" in plain.stderr
    doc = _profile(tmp_path)
    assert (doc["status"], doc["exit_code"]) == ("error", 1)


@pytest.mark.parametrize("death", list(WORKER_DEATHS))
def test_a_dataloader_worker_that_dies_later_never_stops_gpuopt(death: str, tmp_path: Path) -> None:
    """A worker that dies with batches in flight: torch's SIGCHLD handler raises wherever the
    main thread is when the signal comes; after the script's end that was gpuopt writing the
    profile (left 'interrupted', 137, with gpuopt's traceback). What python prints here
    varies from run to run (which error the main thread meets first), so the test holds what
    never varies: python's exit code, the profile's, and nothing of gpuopt's in the output."""
    (tmp_path / "train.py").write_text(_dying_worker(death, 5))
    plain = _python(tmp_path / "train.py", tmp_path)
    ours = _gpuopt("train.py", tmp_path)
    assert ours.returncode == plain.returncode == 1, ours.stderr
    assert GPUOPT_DIR + os.sep not in _theirs(ours.stderr), ours.stderr
    assert not any("Traceback" in line for line in _ours(ours.stderr))
    doc = _profile(tmp_path)
    assert (doc["status"], doc["exit_code"]) == ("error", 1)


LATE_HANDLER = (
    STEPS + "import signal\n\n\ndef handler(signum, frame):\n"
    "    raise RuntimeError('late: the script had ended')\n\n\n"
    "signal.signal(signal.SIGALRM, handler)\n"
    "signal.setitimer(signal.ITIMER_REAL, 0.02)  # fires while gpuopt writes and reports\n"
)


def test_a_handler_of_the_script_raising_after_it_ended_is_said_at_the_end(
    tmp_path: Path,
) -> None:
    """A signal handler of the script's (as torch's SIGCHLD one) that raises once the script
    has ended: the profile is written whole, the report shown, and the handler's error said
    last, as python says an error while a process ends; the exit code stays the script's.
    (Plain python has ended by then: its alarm kills it, 142.)"""
    (tmp_path / "train.py").write_text(LATE_HANDLER)
    ours = _gpuopt("train.py", tmp_path)
    assert ours.returncode == 0, ours.stderr
    doc = _profile(tmp_path)
    assert (doc["status"], doc["exit_code"], doc["steps"]["count"]) == ("ok", 0, 3)
    theirs = _theirs(ours.stderr).strip().splitlines()
    assert theirs[0] == "Traceback (most recent call last):", ours.stderr
    assert theirs[-1] == "RuntimeError: late: the script had ended"
    assert GPUOPT_DIR + os.sep not in "\n".join(theirs)
    assert "profile written" in ours.stderr
