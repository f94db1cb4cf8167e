"""Shared test helpers: run gpuopt as a user would (subprocess) and find the recorded traces."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
SCRIPTS = DATA / "scripts"
# Copies of the recorded traces and H200 measurements the tests read (tests/data/shared/README.md:
# their origin and licences), so that a plain clone runs every test.
SHARED_TRACES = DATA / "shared" / "traces"
H200_DIR = DATA / "shared" / "gpu-h200"


def pytest_configure(config: pytest.Config) -> None:
    """Run as a background job (``make test &``), a shell starts pytest with SIGINT ignored, every
    process it starts inherits that, and Python then never raises KeyboardInterrupt: a script
    that interrupts itself would run on forever. Restore Python's own handler so the tests'
    processes see SIGINT as in a foreground run (exec resets a handled signal to its default)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def run_gpuopt(
    *args: str, cwd: Path | None = None, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m gpuopt ARGS`` in a fresh process, as a user runs it."""
    full_env = dict(os.environ)
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "gpuopt", *args],
        cwd=cwd or ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def marker_site(script: Path, marker: str) -> str:
    """``path:line`` (relative to the repository) of the one line of ``script`` carrying
    ``# <marker>``: tests name the lines they expect by a comment, not a number."""
    lines = script.read_text().splitlines()
    (n,) = [i for i, text in enumerate(lines, 1) if f"# {marker}" in text]
    return f"{script.relative_to(ROOT)}:{n}"


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` loaded from its file (``gpu/check_compile`` for one in a
    subfolder): benchmarks/ is not a package, and nothing imports it by name (registered in
    sys.modules under its file's stem: dataclasses resolve annotations through it)."""
    stem = Path(name).name
    spec = importlib.util.spec_from_file_location(stem, ROOT / "benchmarks" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[stem] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def shared_traces() -> Path:
    """The recorded traces: part of the repository, so a missing folder fails the test."""
    assert SHARED_TRACES.is_dir(), f"{SHARED_TRACES} is missing (tests/data/shared/README.md)"
    return SHARED_TRACES
