"""Every usage error of every command is the contract's one line, ``gpuopt: error: ...``, with
exit code 2 (typer's own is three: Usage, Try, Error); ``--help`` still shows the help.

Both ways in are covered: typer's parser (in-process, and through the console entry point), and
``gpuopt.commands.entry``'s fast paths, which parse the commonest command lines without typer."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import ROOT
from typer.testing import CliRunner

from gpuopt.commands.cli import app

runner = CliRunner()

# What the line holds: a text, or a pattern where typer's versions word the reason differently
# (typer 0.29's pydantic: "input should be greater than or equal to 1"; click 8.3+, which typer
# 0.24-0.25 run on: "no such option '--bogus'"; typer's own click copy: "no such option: --bogus").
USAGE_ERRORS: list[tuple[list[str], str | re.Pattern[str]]] = [
    (["profile", "--steps", "0", "x.py"], "profile: invalid value for '--steps'"),
    (
        ["profile", "--steps", "-1", "x.py"],
        re.compile("-1 is not in the range|greater than or equal to 1"),
    ),
    (
        ["profile", "--steps", "abc", "x.py"],
        re.compile("'abc' is not a valid|unable to parse string"),
    ),
    (["profile", "--warmup", "-2", "x.py"], "--warmup"),
    (["profile", "--window", "x", "x.py"], "--window"),
    (["profile", "--sample-interval", "inf", "x.py"], "inf is not a number of seconds"),
    (["profile", "--sample-interval", "nan", "x.py"], "nan is not a number of seconds"),
    (["profile", "--sample-interval", "0", "x.py"], "--sample-interval"),
    (["profile", "--sample-interval", "-1", "x.py"], "--sample-interval"),
    (["profile", "--nproc-per-node", "0", "x.py"], "--nproc-per-node"),
    (["profile", "--format", "csv", "x.py"], "'csv' is not one of"),
    (["profile", "--master-port", "70000", "x.py"], "--master-port"),
    (["profile", "-o"], "option '-o' requires an argument"),
    (["frobnicate"], "no such command 'frobnicate'"),
    (["--bogus"], re.compile("no such option(: | ')--bogus")),
    (["report"], "report: missing argument 'PATH...'"),
    (["report", "t.json", "-o"], "report: option '-o' requires an argument"),
    (["report", "t.json", "--format", "csv"], "'csv' is not one of"),
    (["report", "t.json", "--jobs", "0"], "--jobs"),
    (["report", "t.json", "--bogus"], re.compile("no such option(: | ')--bogus")),
    (["check", "X"], "check: missing option '--baseline'"),
    (["check", "X", "--baseline"], "option '--baseline' requires an argument"),
    (["check", "X", "--baseline", "Y", "--format", "html"], "'html' is not one of"),
    (["check", "--baseline", "Y"], "missing argument 'CANDIDATE...'"),
    (["compare"], "missing argument"),
    (["compare", "a", "b", "--format", "pdf"], "'pdf' is not one of"),
    (["optimize", "--steps", "1", "x.py"], "optimize: invalid value for '--steps'"),
    (["optimize", "--seed", "-1", "x.py"], "--seed"),
    (["optimize", "--amp-dtype", "fp8", "x.py"], "--amp-dtype 'fp8'"),
    (["schedule"], "schedule: missing argument 'TARGET'"),
    (["schedule", "m:f", "--format", "yaml"], "'yaml' is not one of"),
    (["run", "x.py"], "run: missing option '--fixes'"),
]


@pytest.mark.parametrize(
    ("argv", "needle"), USAGE_ERRORS, ids=lambda a: " ".join(a) if isinstance(a, list) else None
)
def test_every_usage_error_is_one_line_and_exit_2(
    argv: list[str], needle: str | re.Pattern[str]
) -> None:
    r = runner.invoke(app, argv)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuopt: error: "), r.output
    found = needle.search(lines[0]) if isinstance(needle, re.Pattern) else needle in lines[0]
    assert found, r.output
    assert "Usage:" not in r.output and "Try '" not in r.output


def test_the_line_names_the_help_of_the_command_at_fault() -> None:
    r = runner.invoke(app, ["profile", "--steps", "0", "x.py"])
    assert r.output.strip().endswith("; see gpuopt profile --help")
    r = runner.invoke(app, ["frobnicate"])
    assert r.output.strip().endswith("; see gpuopt --help")


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--bogus"], "gpuopt: error: no such option: --bogus; see python -m gpuopt --help"),
        (
            ["check", "--bogus"],
            "gpuopt: error: check: no such option: --bogus; see python -m gpuopt check --help",
        ),
    ],
    ids=["group", "command"],
)
def test_python_m_gpuopt_is_named_whole(argv: list[str], line: str) -> None:
    """The program's name has a space in it; the command at fault is what follows it."""
    r = runner.invoke(app, argv, prog_name="python -m gpuopt")
    assert r.exit_code == 2
    assert r.output.strip().replace("no such option '--bogus'", "no such option: --bogus") == line


@pytest.mark.parametrize(
    "argv",
    [
        ["profile", "--steps", "0", "x.py"],  # typer, through the console entry point
        ["report", "t.json", "-o"],  # declined by the report fast path, then typer
        ["check", "c.json", "--baseline", "b.json", "--max-step-time-regression", "lots"],
        ["check", "c.json", "--baseline", "b.json", "--gates", "nonsense"],  # the fast path
        ["profile", "-o", "", "x.py"],
        ["frobnicate", "--help"],
    ],
    ids=" ".join,
)
def test_the_console_entry_and_its_fast_paths_say_it_in_one_line(argv: list[str]) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "gpuopt", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuopt: error: "), r.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["profile", "--help"],
        ["report", "--help"],
        ["check", "--help"],
        ["compare", "--help"],
        ["optimize", "--help"],
        ["schedule", "--help"],
        ["run", "--help"],
    ],
    ids=" ".join,
)
def test_help_still_shows_the_help(argv: list[str]) -> None:
    r = runner.invoke(app, argv)
    assert r.exit_code == 0 and r.output.startswith("Usage: "), r.output
    assert "gpuopt: error" not in r.output


def test_the_version_and_a_bare_gpuopt() -> None:
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.startswith("gpuopt ")
    r = runner.invoke(app, [])
    assert r.exit_code == 2 and r.output.startswith("Usage: ")  # the help, as before
