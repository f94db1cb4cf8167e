"""What `gpuopt profile` puts on stdout: a report document (--format json/md/html) whole, the
script's own output on stderr meanwhile; and one line, not an empty report, for a script that
failed before its first step."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import run_gpuopt

from gpuopt.runner.script_output import report_on_stdout, script_stdout_to_stderr

PRINTS = (
    "import os, subprocess, sys\n"
    "import torch\n"
    "print('hello from print')\n"
    "os.write(1, b'hello from fd 1\\n')\n"
    "subprocess.run([sys.executable, '-c', 'print(\"hello from a child\")'], check=True)\n"
    "model = torch.nn.Linear(2, 1)\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "for i in range(4):\n"
    "    model(torch.ones(3, 2)).sum().backward()\n"
    "    opt.step()\n"
    "    opt.zero_grad()\n"
    "    print('the script says step', i)\n"
)
SAID = ["hello from print", "hello from fd 1", "hello from a child", "the script says step 3"]


def test_the_redirect_moves_fd_1_to_stderr_and_back(capfd: pytest.CaptureFixture[str]) -> None:
    """At the descriptor (what a C library or a child writes; print() in a real run too: its
    sys.stdout writes to fd 1, which pytest's capture replaces here)."""
    with script_stdout_to_stderr():
        os.write(1, b"written\n")
    os.write(1, b"after\n")
    assert capfd.readouterr() == ("after\n", "written\n")
    with script_stdout_to_stderr(active=False):
        os.write(1, b"left alone\n")
    assert capfd.readouterr().out == "left alone\n"
    assert [report_on_stdout(f, False) for f in ("text", "json", "md", "html")] == [
        False,
        True,
        True,
        True,
    ]
    assert not report_on_stdout("html", quiet=True)


@pytest.mark.parametrize("fmt", ["html", "json"])
def test_a_document_on_stdout_stays_whole_and_the_scripts_output_goes_to_stderr(
    tmp_path: Path, fmt: str
) -> None:
    script = tmp_path / "prints.py"
    script.write_text(PRINTS)
    r = run_gpuopt("profile", "--format", fmt, "-o", str(tmp_path / "run"), str(script))
    assert r.returncode == 0, r.stderr
    if fmt == "html":
        assert r.stdout.startswith("<!DOCTYPE html>") and r.stdout.rstrip().endswith("</html>")
    else:
        assert json.loads(r.stdout)["steps"]["count"] == 4
    for line in SAID:
        assert line not in r.stdout and line in r.stderr, line


def test_the_text_report_leaves_the_scripts_output_on_stdout(tmp_path: Path) -> None:
    script = tmp_path / "prints.py"
    script.write_text(PRINTS)
    r = run_gpuopt("profile", "-o", str(tmp_path / "run"), str(script))
    assert r.returncode == 0, r.stderr
    for line in SAID:
        assert line in r.stdout, line
    assert r.stdout.index("the script says step 3") < r.stdout.index("step time")


def test_a_syntax_error_gets_one_line_and_its_profile(tmp_path: Path) -> None:
    script = tmp_path / "broken.py"
    script.write_text("import torch\nx = (\n")
    r = run_gpuopt("profile", "-o", str(tmp_path / "run"), str(script))
    assert r.returncode == 1 and r.stdout == ""
    assert "SyntaxError: '(' was never closed" in r.stderr  # python's own message first
    ours = [line for line in r.stderr.splitlines() if line.startswith("gpuopt: ")]
    assert ours[-1] == (
        "gpuopt: the script ended (SyntaxError) before its first step, so nothing was "
        f"measured; profile written to {tmp_path / 'run'}/profile.json"
    )
    doc = json.loads((tmp_path / "run" / "profile.json").read_text())
    assert doc["status"] == "error" and doc["exit_code"] == 1
    assert doc["error"]["type"] == "SyntaxError" and doc["steps"]["count"] == 0
    # a document asked for on stdout is still the document
    r = run_gpuopt(
        "profile", "--force", "--format", "json", "-o", str(tmp_path / "run"), str(script)
    )
    assert r.returncode == 1 and json.loads(r.stdout)["error"]["type"] == "SyntaxError"


def test_an_argument_error_of_the_script_gets_one_line(tmp_path: Path) -> None:
    script = tmp_path / "args.py"
    script.write_text(
        "import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('--lr')\n"
        "parser.parse_args()\n"
    )
    r = run_gpuopt("profile", "-o", str(tmp_path / "run"), str(script), "--bogus")
    assert r.returncode == 2 and r.stdout == ""
    assert "error: unrecognized arguments: --bogus" in r.stderr
    assert "gpuopt: the script ended (sys.exit(2)) before its first step" in r.stderr


def test_a_run_that_ends_well_without_steps_still_gets_its_report(tmp_path: Path) -> None:
    """No step and no error: the report says how gpuopt counts steps, which the user needs."""
    script = tmp_path / "nosteps.py"
    script.write_text("print('done')\n")
    r = run_gpuopt("profile", "-o", str(tmp_path / "run"), str(script))
    assert r.returncode == 0 and "no measured steps" in r.stdout, r.stderr
