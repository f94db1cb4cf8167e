"""The entry point's fast path for `gpuopt report` and `gpuopt profile`: it must parse exactly as
typer does, or leave the command line to typer."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, SHARED_TRACES, public_file
from typer.testing import CliRunner

import gpuopt.commands.entry as entry
import gpuopt.commands.profile as runner_main
import gpuopt.commands.quick_exit as quick_exit_module
import gpuopt.commands.report as command
from gpuopt import debug
from gpuopt.commands.cli import app
from gpuopt.commands.options import PROFILE, REPORT
from gpuopt.runner.options import ProfileOptions

ACCEPTED = [
    ["report", "t.json"],
    ["report", "t.json", "--format", "json"],
    ["report", "--format", "json", "t.json"],
    ["report", "-f", "md", "-o", "out.md", "t.json"],
    ["report", "t.json", "--format=html"],
    ["report", "t.json", "--output=x.html"],
    ["report", "runs/a b/", "-o", "x", "--format", "text"],
    ["report", "a", "b"],
    ["report", "a", "-f", "md", "b"],
]
DECLINED = [
    [],
    ["report"],
    ["report", "--help"],
    ["report", "t.json", "--help"],
    ["--version"],
    ["profile", "x.py"],
    ["report", "t.json", "--format", "JSON"],
    ["report", "t.json", "--format", "csv"],
    ["report", "t.json", "-f"],
    ["report", "t.json", "-o", "-"],
    ["report", "-"],
    ["report", "t.json", "-fjson"],
    ["report", "t.json", "--format", "json", "--format", "md"],
    ["report", "--", "t.json"],
    ["report", "t.json", "--bogus"],
    ["report", ""],
    ["report", "t.json", "--format="],
    ["report", "t.json", "-o="],
    ["report", "t.json", "--debug"],
    ["--debug", "report", "t.json"],
]


def typer_parse(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    seen: list[tuple[Any, ...]] = []
    monkeypatch.setattr(command, "run_report", lambda *a, **kw: seen.append((*a, kw)))
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0 and len(seen) == 1, r.output
    return seen[0]


def fast_call(values: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    """What the fast path calls run_report with, for its values."""
    seen: list[tuple[Any, ...]] = []
    monkeypatch.setattr(command, "run_report", lambda *a, **kw: seen.append((*a, kw)))
    command.report_values(values)
    (call,) = seen
    return call


@pytest.mark.parametrize("argv", ACCEPTED, ids=" ".join)
def test_accepted_command_lines_parse_as_typer_parses_them(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = entry.parse_fast(argv, REPORT)
    assert fast is not None
    assert entry.fast_command(argv) == ("report", fast)
    assert fast_call(fast, monkeypatch) == typer_parse(argv, monkeypatch)


@pytest.mark.parametrize("argv", DECLINED, ids=lambda a: " ".join(a) or "(empty)")
def test_anything_else_goes_to_typer(argv: list[str]) -> None:
    assert entry.parse_fast(argv, REPORT) is None


def report_in_child(
    trace: Path, out: Path, before: str = "", after: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``gpuopt report TRACE -o OUT`` through the entry point in a fresh interpreter: the lines
    ``before`` run first, ``after`` once the command is done (its exit code printed first,
    ``exit N``, not taken)."""
    code = (
        "import os, sys\n"
        "import gpuopt.commands.entry as e\n"
        "e.quick_exit = lambda code: print('exit', code)\n"
        f"{before}"
        f"sys.argv = ['gpuopt', 'report', {str(trace)!r}, '-o', {str(out)!r}]\n"
        "e.main()\n"
        f"{after}"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60
    )


def test_fast_path_runs_the_report_without_typer(tmp_path: Path) -> None:
    trace = ROOT / "tests" / "data" / "report" / "gpu_ranks.json"
    out = tmp_path / "r.md"
    after = (
        "print('typer' in sys.modules, 'click' in sys.modules or 'typer._click' in sys.modules)\n"
    )
    r = report_in_child(trace, out, after=after)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["exit 0", "False False"]
    assert out.read_text().startswith(
        "#"
    )  # Markdown, chosen from -o's extension as typer's path does


def test_interrupt_and_bad_input_exit_codes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def leave(code: int) -> None:
        raise SystemExit(code)

    monkeypatch.setattr(entry, "quick_exit", leave)
    monkeypatch.setattr(quick_exit_module, "quick_exit", leave)  # exit_quickly_on's own name
    monkeypatch.setattr(sys, "argv", ["gpuopt", "report", str(tmp_path / "missing.json")])
    with pytest.raises(SystemExit) as ei:
        entry.main()
    assert ei.value.code == 2 and "no such file" in capsys.readouterr().err

    def interrupted(*_: Any, **__: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "run_report", interrupted)
    with pytest.raises(SystemExit) as ei:
        entry.main()
    assert ei.value.code == 130  # as typer ends an interrupted command


PROFILE_ACCEPTED = [
    ["profile", "train.py"],
    ["profile", "train.py", "--lr", "0.1", "--help"],
    ["profile", "-o", "runs/x", "train.py", "-o", "y"],
    ["profile", "--quiet", "--out=r", "t.py", "--quiet"],
    ["profile", "--out", "r", "--quiet", "t.py", "a", "--", "b"],
    ["profile", "--force", "-o", "r", "t.py", "--force"],
]
PROFILE_DECLINED = [
    ["profile"],
    ["profile", "--help"],
    ["profile", "-m", "mod"],
    ["profile", "--steps", "5", "t.py"],
    ["profile", "--format", "html", "t.py"],  # typer's: the script's stdout goes to stderr
    ["profile", "--format=json", "-o", "r", "t.py"],
    ["profile", "-o", "x"],
    ["profile", "--quiet", "--quiet", "t.py"],
    ["profile", "--force", "--force", "t.py"],
    ["profile", "-o", "a", "-o", "b", "t.py"],
    ["profile", "--", "t.py"],
    ["profile", "-o", "--quiet", "t.py"],
    ["profile", "--out=", "t.py"],
    ["profile", "-"],
    ["profile", ""],
    ["profile", "-otmp", "t.py"],
    ["profile", "--debug", "t.py"],
    ["--debug", "profile", "t.py"],
    ["report", "t.json", "x.py"],
]


@pytest.mark.parametrize("argv", PROFILE_ACCEPTED, ids=" ".join)
def test_accepted_profile_command_lines_give_typers_options(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = entry.parse_fast(argv, PROFILE)
    assert fast is not None
    assert entry.fast_command(argv) == ("profile", fast)
    seen: list[ProfileOptions] = []
    monkeypatch.setattr(runner_main, "run_profile", seen.append)
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0 and len(seen) == 1, r.output
    assert seen[0] == ProfileOptions.from_values(fast)


@pytest.mark.parametrize("argv", PROFILE_DECLINED, ids=lambda a: " ".join(a))
def test_any_other_profile_command_line_goes_to_typer(argv: list[str]) -> None:
    assert entry.parse_fast(argv, PROFILE) is None


def test_profile_fast_path_runs_the_script_without_typer(tmp_path: Path) -> None:
    script = tmp_path / "probe_modules.py"
    script.write_text(
        "import sys\nprint('typer' in sys.modules, sys.argv[1:])\nraise SystemExit(3)\n"
    )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuopt",
            "profile",
            "--quiet",
            "-o",
            str(tmp_path / "run"),
            str(script),
            "-o",
            "x",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 3, r.stderr  # the script's exit code
    assert r.stdout.splitlines()[0] == "False ['-o', 'x']"
    assert (tmp_path / "run" / "profile.json").exists()


@pytest.mark.parametrize(
    "argv",
    [["--debug", *a] for a in PROFILE_ACCEPTED] + [["--debug", *a] for a in ACCEPTED],
    ids=" ".join,
)
def test_a_leading_debug_is_taken_and_the_rest_parses_as_typer_parses_it(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gpuopt --debug CMD ...``: the entry takes the global option, then the fast path parses
    what is left as typer parses the whole line."""
    monkeypatch.delenv(debug.ENV, raising=False)
    monkeypatch.setattr(debug, "_isolated", debug._isolated)  # global_debug isolates: undone
    try:
        rest = entry.global_debug(argv)
        assert rest == argv[1:] and debug.enabled()
        got = entry.fast_command(rest)
        assert got is not None
        name, values = got
        seen: list[Any] = []
        monkeypatch.setattr(runner_main, "run_profile", seen.append)
        monkeypatch.setattr(command, "run_report", lambda *a, **kw: seen.append((*a, kw)))
        if name == "profile":
            fast: Any = ProfileOptions.from_values(values)
        else:
            command.report_values(values)
            fast = seen.pop()
        r = CliRunner().invoke(app, argv)
        assert r.exit_code == 0 and len(seen) == 1, r.output
        assert seen[0] == fast
    finally:
        debug.disable()
        logging.getLogger("gpuopt").propagate = True


MODULE_LINES = [
    (["profile", "-m", "pkg.mod", "--help"], ["--help"]),
    (["profile", "--quiet", "-m", "pkg.mod", "--steps", "3", "x"], ["--steps", "3", "x"]),
    (["profile", "-o", "-m", "-m", "pkg.mod", "-o", "y"], ["-o", "y"]),
    (["profile", "-mpkg.mod", "-h"], ["-h"]),
    (["profile", "-m", "pkg.mod", "--", "--help"], ["--help"]),
    (["profile", "-m", "pkg.mod"], []),
]


@pytest.mark.parametrize(("argv", "module_args"), MODULE_LINES, ids=lambda a: " ".join(a))
def test_everything_after_the_module_is_the_modules(
    argv: list[str], module_args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As with `python -m MODULE ARGS`: gpuopt's options go before -m, the rest is the module's."""
    seen: list[ProfileOptions] = []
    monkeypatch.setattr(runner_main, "run_profile", seen.append)
    r = CliRunner().invoke(app, entry.module_args_after_module(argv))
    assert r.exit_code == 0 and len(seen) == 1, r.output
    assert seen[0].module == "pkg.mod"
    assert seen[0].args == module_args


def test_the_script_form_is_left_alone() -> None:
    argv = ["profile", "--steps", "2", "t.py", "-m", "x", "--help"]
    assert entry.module_args_after_module(argv) == argv


def numpy_imports_ma() -> bool:
    """numpy 1.x imports its masked arrays with itself (the declared floor is 1.24); 2.x on
    first use."""
    code = "import sys, numpy; print('numpy.ma' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    return out.stdout.strip() == "True"


def test_a_trace_report_imports_only_what_it_uses(tmp_path: Path) -> None:
    """``gpuopt report TRACE`` pays every import at every start: not numpy's masked arrays
    (``np.unique`` and friends import them on first call, 15-20 ms), nor the optimize report's
    renderers (html, statistics, random) for an input that is no optimize result."""
    trace = SHARED_TRACES / "hta" / "trace_filter" / "sampled_rank-0.json.gz"
    trace = public_file(trace)  # two ProfilerStep names: the last-step rule runs
    after = (
        "print(sorted(m for m in ('numpy.ma', 'gpuopt.optimize.output.report', 'statistics',"
        " 'html') if m in sys.modules))\n"
    )
    if numpy_imports_ma():
        after = after.replace("'numpy.ma', ", "")
    r = report_in_child(trace, tmp_path / "r.json", after=after)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["exit 0", "[]"]
    assert (tmp_path / "r.json").read_text().startswith("{")


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="threads counted in /proc")
@pytest.mark.parametrize("preset", [None, "2"])
def test_a_report_runs_numpy_with_one_blas_thread(tmp_path: Path, preset: str | None) -> None:
    """OpenBLAS's threads (one per core, started when numpy is imported) would spin beside the
    report: one is asked for while the report runs, and the variable is gone after it; a number
    the environment names is kept."""
    trace = public_file(SHARED_TRACES / "hta" / "trace_filter" / "sampled_rank-0.json.gz")
    after = (
        "assert 'numpy' in sys.modules\n"
        "print(len(os.listdir('/proc/self/task')), os.environ.get('OPENBLAS_NUM_THREADS'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if preset is not None:
        env["OPENBLAS_NUM_THREADS"] = preset
    r = report_in_child(trace, tmp_path / "r.json", after=after, env=env)
    assert r.returncode == 0, r.stderr
    threads, value = r.stdout.split("\n")[1].split()
    if preset is None:
        assert (threads, value) == ("1", "None")
    else:
        assert value == preset


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_report_keeps_freed_memory_in_the_heap_while_it_runs(tmp_path: Path) -> None:
    """Large arrays come from the heap, and what is freed stays there for the next ones, while
    the report runs (and the decode helper it forks); the defaults are back after it."""
    trace = public_file(SHARED_TRACES / "hta" / "trace_filter" / "sampled_rank-0.json.gz")
    before = (
        "calls = []\n"
        "real = e._mallopt\n"
        "e._mallopt = lambda p, v: calls.append((p, v)) or real(p, v)\n"
    )
    r = report_in_child(trace, tmp_path / "r.json", before=before, after="print(calls)\n")
    assert r.returncode == 0, r.stderr
    calls = r.stdout.split("\n")[1]
    assert calls == str([(-3, 32 << 20), (-1, 1 << 30), (-3, 128 << 10), (-1, 128 << 10)])
