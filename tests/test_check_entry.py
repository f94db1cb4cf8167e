"""The entry point's fast path for `gpuopt check`: every command line it accepts gives exactly the
arguments typer gives; anything else goes to typer; it runs without importing typer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from gate_support import run, write
from typer.testing import CliRunner

import gpuopt.commands.check as command
import gpuopt.commands.entry as entry
from gpuopt.commands.cli import app
from gpuopt.commands.options import CHECK


def parse_check(argv: list[str]) -> command.CheckArgs | None:
    """The arguments the fast path runs ``check_main`` with, None where typer takes the line."""
    got = entry.fast_command(argv)
    if got is None or got[0] != "check":
        return None
    values = got[1]
    assert values == entry.parse_fast(argv, CHECK)
    return command.CheckArgs.from_values(values)


ACCEPTED = [
    ["check", "c", "--baseline", "b"],
    ["check", "c1", "c2", "--baseline", "b1", "--baseline=b2", "--format", "json"],
    ["check", "--baseline", "b", "c", "--strict", "--junit", "x.xml", "--config=p.toml"],
    ["check", "c", "--baseline", "b", "--no-strict", "--allow", "a", "--allow", "b"],
    ["check", "c", "--baseline", "b", "--max-step-time-regression", "10%", "--gates=counters"],
    [
        "check",
        "c",
        "--baseline",
        "b",
        "--max-data-wait-increase=2pt",
        "--max-gpu-idle-increase",
        "4pt",
        "--min-gpu-util",
        "60%",
        "--step-time-noise",
        "2%",
        "--share-noise",
        "1pt",
        "--format=md",
    ],
    ["check", "c", "--baseline", "b", "-o", "gate.md"],
    ["check", "c", "--baseline", "b", "--output=gate.json", "--format", "json"],
    ["check", "c", "--output", "g.txt", "--baseline", "b", "--junit", "x.xml"],
]
DECLINED = [
    ["check"],
    ["check", "c"],
    ["check", "--baseline", "b"],
    ["check", "c", "--baseline", "b", "--help"],
    ["check", "c", "--baseline", "b", "--format", "html"],
    ["check", "c", "--baseline", "b", "--format", "json", "--format", "md"],
    ["check", "c", "--baseline", "b", "--junit"],
    ["check", "c", "--baseline", "-b"],
    ["check", "c", "--baseline", "b", "--bogus"],
    ["check", "c", "--baseline", "b", "--"],
    ["check", "c", "--baseline="],
    ["check", "c", "--baseline", "b", "--strict", "--strict"],
    ["check", "c", "--baseline", "b", "--gates", "a", "--gates", "b"],
    ["check", "c", "--baseline", "b", "-o", "a.md", "--output", "b.md"],
    ["check", "c", "--baseline", "b", "-o", "-"],
    ["check", "c", "--baseline", "b", "-o=x.md"],
    ["check", "c", "--baseline", "b", "-ox.md"],
    ["check", "c", "--baseline", "b", "-o"],
    ["report", "c"],
]


def typer_parse(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> command.CheckArgs:
    seen: list[command.CheckArgs] = []

    def capture(args: command.CheckArgs) -> int:
        seen.append(args)
        return 0

    monkeypatch.setattr(command, "check_main", capture)
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0, r.output
    (args,) = seen
    return args


@pytest.mark.parametrize("argv", ACCEPTED, ids=" ".join)
def test_accepted_command_lines_parse_as_typer_parses_them(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = parse_check(argv)
    assert fast is not None
    assert fast == typer_parse(argv, monkeypatch)


@pytest.mark.parametrize("argv", DECLINED, ids=lambda a: " ".join(a))
def test_anything_else_goes_to_typer(argv: list[str]) -> None:
    assert parse_check(argv) is None


def test_fast_path_gates_without_typer(tmp_path: Path) -> None:
    base = write(tmp_path / "base.json", run([0.1] * 12))
    cand = write(tmp_path / "cand.json", run([0.1] * 12, syncs=2.0))
    argv = ["gpuopt", "check", str(cand), "--baseline", str(base)]

    def python(code: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
        )

    # as the console script runs it: the gate's exit code, the process ended by quick_exit
    r = python(f"import sys\nimport gpuopt.commands.entry as e\nsys.argv = {argv!r}\ne.main()\n")
    assert r.returncode == 1, r.stderr
    assert r.stdout.rstrip().endswith("REGRESSION: syncs per step")
    # where quick_exit cannot end the process, the code is still the gate's; typer never loaded
    r = python(
        "import sys\nimport gpuopt.commands.entry as e\ne.quick_exit = lambda code: None\n"
        f"sys.argv = {argv!r}\n"
        "try:\n    e.main()\nexcept SystemExit as exc:\n    print('exit', exc.code)\n"
        "print('typer' in sys.modules)\n"
    )
    assert r.stdout.strip().splitlines()[-2:] == ["exit 1", "False"], r.stderr


AMBIGUOUS = [
    ["check", "c1", "--baseline", "b1", "b2"],  # the README's old `--baseline BASELINE...`
    ["check", "--baseline", "b1", "c1", "c2"],
    ["check", "c1", "--baseline=b1", "b2", "--format", "json"],
    ["check", "c1", "--format", "json", "--baseline", "b1", "b2", "--strict"],
]


@pytest.mark.parametrize("argv", AMBIGUOUS, ids=" ".join)
def test_a_bare_path_after_a_baseline_is_refused_not_made_a_candidate(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--baseline B1 B2` once made B2 a candidate without a word; now the fast path leaves it
    to typer's command, which refuses it: one line, exit 2, naming both ways to write it."""
    assert parse_check(argv) is None
    called: list[object] = []
    monkeypatch.setattr(command, "check_main", lambda args: called.append(args) or 0)
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 2 and not called
    (line,) = r.output.strip().splitlines()
    assert line.startswith("gpuopt: error: check: ") and "follows --baseline b1" in line
    assert "--baseline b1 --baseline" in line and "Traceback" not in r.output


def test_each_accepted_baseline_form_gives_the_sides_meant(monkeypatch: pytest.MonkeyPatch) -> None:
    """Repeated --baseline (both spellings), and the one bare path after --baseline (it can only
    be the candidate): each side is what the user meant, on both parsers."""
    forms = {
        ("c1", "c2", "--baseline", "b1", "--baseline", "b2"): (["c1", "c2"], ["b1", "b2"]),
        ("c1", "--baseline=b1", "--baseline=b2"): (["c1"], ["b1", "b2"]),
        ("--baseline", "b1", "c1"): (["c1"], ["b1"]),
        ("--baseline", "b1", "--format", "json", "c1", "c2"): (["c1", "c2"], ["b1"]),
    }
    for args, (cand, base) in forms.items():
        argv = ["check", *args]
        fast = parse_check(argv)
        assert fast is not None, argv
        assert (fast.candidate, fast.baseline) == (cand, base)
        slow = typer_parse(argv, monkeypatch)
        assert (slow.candidate, slow.baseline) == (cand, base)


def test_the_ambiguity_check_reads_the_options_that_take_a_value_from_the_declaration() -> None:
    """typer's command and the ambiguity check agree on which options take a value: an option
    added to the declaration is skipped with its value by both."""
    from gpuopt.commands.check_argv import ambiguous_baseline

    cmd = typer_command("check")
    typer_valued = {
        name
        for param in cmd.params
        if param.param_type_name == "option" and not getattr(param, "is_flag", False)
        for name in param.opts
    }
    assert typer_valued == set(CHECK.valued())
    assert {"-o", "--output", "--gates", "--max-step-time-regression"} <= typer_valued
    for flag in sorted(typer_valued):
        assert ambiguous_baseline(["c", flag, "v", "--baseline", "b"]) is None, flag
        assert ambiguous_baseline(["--baseline", "b", "c", flag, "v"]) is None, flag


def typer_command(name: str):  # type: ignore[no-untyped-def]
    import typer.main

    group = typer.main.get_command(app)
    return group.commands[name]  # type: ignore[attr-defined]
