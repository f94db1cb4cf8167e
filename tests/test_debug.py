"""`--debug` and GPUOPT_DEBUG=1: the debug lines on stderr, what they say, and that nothing is
said without them (docs/debugging.md)."""

from __future__ import annotations

import logging
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from typer.testing import CliRunner

import gpuopt
import gpuopt.commands.entry as entry
import gpuopt.commands.report as report_command
from gpuopt import debug
from gpuopt.commands.cli import app
from gpuopt.errors import GpuoptError
from gpuopt.optimize.run import runs
from gpuopt.probes import environment
from gpuopt.probes.compile import CompileProbe
from gpuopt.script.child_process import run_child

PREFIX = "gpuopt: debug: "


@pytest.fixture(autouse=True)
def _debug_off(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts and ends with debugging off, GPUOPT_DEBUG unset and the library's
    logger as a library's (other tests' processes inherit this one's environment)."""
    monkeypatch.delenv(debug.ENV, raising=False)
    debug.disable()
    monkeypatch.setattr(debug, "_isolated", False)
    logging.getLogger("gpuopt").propagate = True  # as a library's, whatever ran before
    yield
    debug.disable()
    debug.tag("")
    logging.getLogger("gpuopt").propagate = True


def debug_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(PREFIX)]


# -- a probe that gives up, through the whole command ------------------------------------------

# the sampler's start fails as a probe's does when its torch lacks what it needs
_PLANTED = """
import sys
import gpuopt.probes.samplers as samplers

def start(self, ctx):
    raise RuntimeError("planted: this torch has no such private name")

samplers.UtilizationSampler.start = start
sys.argv = ["gpuopt", *sys.argv[1:]]
from gpuopt.commands.entry import main
main()
"""


def _profile(tmp_path: Path, name: str, *argv: str, env: dict[str, str] | None = None) -> str:
    script = tmp_path / "train.py"
    script.write_text(
        "import logging\n"
        "logging.basicConfig(level=logging.DEBUG, format='USER %(name)s %(message)s')\n"
        "logging.getLogger('train').debug('the script logs')\n"
        "print('trained')\n"
    )
    full_env = {k: v for k, v in __import__("os").environ.items() if k != debug.ENV}
    full_env.update(env or {})
    r = subprocess.run(
        [sys.executable, "-c", _PLANTED, *argv, "--quiet", "-o", str(tmp_path / name), str(script)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env=full_env,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["trained"]
    return r.stderr


def _said(stderr: str, run_dir: Path) -> list[str]:
    """The debug lines that do not change from run to run: not the pid and argv line, and the
    run directory's path said as DIR."""
    return [line.replace(str(run_dir), "DIR") for line in debug_lines(stderr) if "pid " not in line]


def test_a_probe_that_gives_up_is_reported_with_its_reason(tmp_path: Path) -> None:
    err = _profile(tmp_path, "a", "--debug", "profile")
    lines = debug_lines(err)
    assert f"{PREFIX}runner.session: probe sampler: gave up at start" in lines
    assert (
        f"{PREFIX}runner.session: RuntimeError: planted: this torch has no such private name"
        in (lines)
    )
    assert f"{PREFIX}runner.session: probe dataloader: installed" in lines
    assert f"{PREFIX}runner.session: probe training: skipped: no --record-losses" in lines
    assert any(line.startswith(f"{PREFIX}gpuopt {gpuopt.__version__}, Python ") for line in lines)
    assert any(line.startswith(f"{PREFIX}installed: torch ") for line in lines)
    assert any("transformers " in line and "timm " in line for line in lines)
    import torch

    assert f"{PREFIX}{debug.torch_build()}" in lines
    assert f"torch {torch.__version__}" in debug.torch_build()
    # the user's own logging is the user's: gpuopt's records never reach its handlers
    assert "USER train the script logs" in err
    assert "USER gpuopt" not in err
    # the run directory keeps the same lines
    assert (tmp_path / "a" / "debug.log").read_text().splitlines() == lines


def test_the_run_directorys_debug_log_never_replaces_a_file(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "debug.log").write_text("the user's own file\n")
    err = _profile(tmp_path, "a", "--debug", "profile")
    assert (tmp_path / "a" / "debug.log").read_text() == "the user's own file\n"
    kept = (tmp_path / "a" / "debug-2.log").read_text().splitlines()
    assert (
        kept == debug_lines(err)
        and f"{PREFIX}runner.session: probe sampler: gave up at start" in kept
    )
    _profile(tmp_path, "b", "profile")
    assert not any(p.name.startswith("debug") for p in (tmp_path / "b").iterdir())


def test_the_variable_and_the_option_say_the_same(tmp_path: Path) -> None:
    by_option = _said(_profile(tmp_path, "a", "--debug", "profile"), tmp_path / "a")
    by_variable = _said(_profile(tmp_path, "b", "profile", env={debug.ENV: "1"}), tmp_path / "b")
    by_command_option = _said(_profile(tmp_path, "c", "profile", "--debug"), tmp_path / "c")
    assert by_option == by_variable == by_command_option
    assert len(by_option) > 10 and f"{PREFIX}these lines are also in DIR/debug.log" in by_option


def test_without_debug_stderr_has_no_debug_line(tmp_path: Path) -> None:
    err = _profile(tmp_path, "a", "profile", env={debug.ENV: "0"})
    assert debug_lines(err) == []
    assert "gpuopt: probe sampler could not start" not in err  # a warning of the profile only
    assert "USER gpuopt" not in err and "USER train the script logs" in err


# -- the swallowed exceptions -----------------------------------------------------------------


def test_a_probe_without_the_private_name_it_reads_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A torch whose Dynamo has no ``_compilation_metrics`` (nor the graph-break hook): the
    compile probe gives them up, labelled for the run's warnings, and under --debug the lookup
    says what it missed and why."""
    import importlib

    from gpuopt import torch_compat

    real = importlib.import_module

    def import_module(name: str, *args: Any) -> Any:
        if name.startswith("torch._dynamo."):
            return types.ModuleType(name)  # a module without the names the probe reads
        return real(name, *args)

    monkeypatch.setattr("gpuopt.torch_compat.importlib.import_module", import_module)
    torch_compat.reset()
    try:
        debug.enable()
        capsys.readouterr()
        CompileProbe()._attach()
        lines = debug_lines(capsys.readouterr().err)
        warnings = torch_compat.take_unavailable()
    finally:
        torch_compat.reset()
    where = f"{PREFIX}torch_compat: compile probe"
    for name in ("torch._dynamo.utils._compilation_metrics", "log_graph_break"):
        (line,) = [x for x in lines if x.startswith(where) and name in x]
        assert " not available on torch " in line and "(AttributeError: " in line
        assert any(name in w and "not available on torch" in w for w in warnings)


class _BrokenTorch(types.ModuleType):
    __version__ = "2.13.0"

    def get_num_threads(self) -> int:
        raise RuntimeError("planted: no thread count")

    class cuda:  # noqa: N801 - torch's name
        @staticmethod
        def is_available() -> bool:
            raise RuntimeError("planted: broken driver")


def test_a_swallowed_exception_is_logged_at_debug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", _BrokenTorch("torch"))
    env = environment.environment()  # quiet: nothing on stderr, the same result
    assert env.torch == "2.13.0" and env.gpus == []
    assert capsys.readouterr().err == ""
    debug.enable()
    capsys.readouterr()
    assert environment.environment() == env
    assert debug_lines(capsys.readouterr().err) == [
        f"{PREFIX}probes.environment: torch.get_num_threads() failed: planted: no thread count",
        f"{PREFIX}probes.environment: the GPUs not listed: RuntimeError: planted: broken driver",
    ]


def test_the_records_are_standard_logging_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """gpuopt imported as a library: its loggers are the ``gpuopt.*`` hierarchy, which the
    application's logging configuration sees (debugging off)."""

    class Keep(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.records: list[logging.LogRecord] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)

    monkeypatch.setitem(sys.modules, "torch", _BrokenTorch("torch"))
    keep, root = Keep(), logging.getLogger()
    monkeypatch.setattr(root, "level", logging.DEBUG)
    root.addHandler(keep)
    try:
        environment.environment()
    finally:
        root.removeHandler(keep)
    got = [(r.name, r.levelno, r.getMessage()) for r in keep.records]
    message = "torch.get_num_threads() failed: planted: no thread count"
    assert ("gpuopt.probes.environment", logging.DEBUG, message) in got
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("gpuopt").handlers)


def test_debug_once_says_a_repeated_message_once(capsys: pytest.CaptureFixture[str]) -> None:
    debug.enable()
    capsys.readouterr()
    log = debug.logger("gpuopt.tests.once")
    for i in range(3):
        log.debug_once("per-op failure %d", i)
    assert debug_lines(capsys.readouterr().err) == [
        f"{PREFIX}tests.once: per-op failure 0 (said once)"
    ]


def test_a_rank_names_itself(capsys: pytest.CaptureFixture[str]) -> None:
    debug.tag("rank 1")
    debug.enable()
    capsys.readouterr()
    debug.logger("gpuopt.tests.rank").debug("decided")
    assert capsys.readouterr().err == f"{PREFIX}rank 1: tests.rank: decided\n"


def test_a_traceback_is_one_prefixed_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    debug.enable()
    capsys.readouterr()
    try:
        raise ValueError("planted\nsecond line")
    except ValueError:
        debug.logger("gpuopt.tests.tb").debug("failed", exc_info=True)
    err = capsys.readouterr().err
    assert err.splitlines() == debug_lines(err)
    assert f"{PREFIX}tests.tb: failed" in err and f"{PREFIX}tests.tb: second line" in err


# -- the options --------------------------------------------------------------------------------


def test_the_version_names_torch_and_its_cuda() -> None:
    import torch

    r = CliRunner().invoke(app, ["--version"])
    cuda = torch.version.cuda or "none"
    assert r.exit_code == 0
    assert r.output == f"gpuopt {gpuopt.__version__} (torch {torch.__version__}, CUDA {cuda})\n"


def test_the_version_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    r = CliRunner().invoke(app, ["--version"])
    assert r.exit_code == 0
    assert r.output.startswith(f"gpuopt {gpuopt.__version__} (torch not importable (")


@pytest.mark.parametrize(
    "argv",
    [["--debug", "report", "t.json"], ["report", "--debug", "t.json"]],
    ids=" ".join,
)
def test_debug_before_or_after_the_command(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[tuple[Any, ...]] = []
    monkeypatch.setattr(report_command, "run_report", lambda *a, **kw: seen.append(a))
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0 and len(seen) == 1, r.output
    assert debug.enabled()
    import os

    assert os.environ[debug.ENV] == "1"  # what the command's child processes inherit


@pytest.mark.parametrize(
    "command", ["profile", "run", "report", "schedule", "check", "compare", "optimize"]
)
def test_every_command_takes_debug(command: str) -> None:
    r = CliRunner().invoke(app, [command, "--help"])
    assert r.exit_code == 0 and "--debug" in r.output


def test_the_entry_takes_a_leading_debug_then_the_fast_paths_run() -> None:
    assert entry.global_debug(["report", "t.json"]) == ["report", "t.json"]
    assert not debug.enabled()
    assert entry.global_debug(["--debug", "report", "t.json"]) == ["report", "t.json"]
    assert debug.enabled()
    assert entry.fast_command(["report", "t.json", "--debug"]) is None  # typer takes it


@pytest.mark.parametrize("value", ["1", "true", "yes", "on", "2"])
def test_the_variable_turns_it_on(value: str) -> None:
    assert debug.wanted({debug.ENV: value})


@pytest.mark.parametrize("value", ["", "0", "false", "no", "off", " OFF "])
def test_the_variable_leaves_it_off(value: str) -> None:
    assert not debug.wanted({debug.ENV: value}) and not debug.wanted({})


# -- child processes ----------------------------------------------------------------------------


def test_a_childs_debug_lines_are_passed_on_and_not_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "failing_child.py").write_text(
        "import sys\n"
        "print('gpuopt: debug: child: what it decided', file=sys.stderr)\n"
        "print('the real reason', file=sys.stderr)\n"
        "print('gpuopt: debug: child: after it', file=sys.stderr)\n"
        "sys.exit(1)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with pytest.raises(GpuoptError, match="the sweep failed: the real reason$"):
        run_child("failing_child", {}, tmp_path / "out.json", 60, "the sweep")
    assert debug_lines(capsys.readouterr().err) == [
        f"{PREFIX}child: what it decided",
        f"{PREFIX}child: after it",
    ]


def test_an_optimize_runs_failure_tail_leaves_out_debug_lines() -> None:
    text = f"Traceback ...\nValueError: boom\n{PREFIX}runner.session: probe x: installed\n"
    assert runs._tail(text) == "Traceback ...\nValueError: boom"


def _silent_handlers() -> list[str]:
    """The broad ``except`` clauses in gpuopt whose whole body only leaves (``pass``,
    ``continue``, ``break``, a bare ``return``): each swallows an error without a word."""
    import ast

    found = []
    for path in sorted((ROOT / "gpuopt").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ExceptHandler):
                continue
            kinds = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            names = {k.id for k in kinds if isinstance(k, ast.Name)}
            if node.type is not None and not names & {"Exception", "BaseException"}:
                continue
            leaves = (ast.Pass, ast.Continue, ast.Break)
            if all(
                isinstance(b, leaves) or (isinstance(b, ast.Return) and b.value is None)
                for b in node.body
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_no_broad_except_swallows_without_a_debug_line() -> None:
    assert _silent_handlers() == []
