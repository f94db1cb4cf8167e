"""Shared test helpers: run gpuopt as a user would (subprocess) and find the recorded traces."""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
SCRIPTS = DATA / "scripts"
# The recorded traces and H200 measurements the tests read (tests/data/shared/README.md): copies of
# the project's reference folder, committed; the fetched public ones (tests/data/public.toml) are
# put in place at set-up (tests/public_data.py), or missing.
SHARED_TRACES = DATA / "shared" / "traces"
H200_DIR = DATA / "shared" / "gpu-h200"


def pytest_sessionstart(session: pytest.Session) -> None:
    """The public data files (tests/data/public.toml) in place, where they can be had here."""
    import public_data

    public_data.setup()


def public_file(path: Path, how: str = "python tests/public_data.py") -> Path:
    """``path``, a public file put in place at set-up (``how``); the test is skipped where it is
    not there."""
    if not path.exists():
        pytest.skip(f"{path.relative_to(ROOT)} is not set up ({how}: its snapshot is missing)")
    return path


@functools.cache
def _corpus_scripts() -> Path:
    import public_data

    cs = public_data.corpus_sources()
    dest = ROOT / "benchmarks" / "corpus" / ".cache" / "scripts"
    sources = cs.load_sources(ROOT / "benchmarks" / "corpus" / "sources.toml")
    cs.scripts_tree(sources, cs.SNAPSHOTS, dest)
    return dest


def corpus_source(name: str) -> Path:
    """The folder of sources.toml's source ``name`` (benchmarks/corpus/.cache/sources/NAME, as
    ``python benchmarks/corpus_sources.py NAME`` sets it up); skipped without its snapshot."""
    import public_data

    cs = public_data.corpus_sources()
    src = cs.load_sources(ROOT / "benchmarks" / "corpus" / "sources.toml")[name]
    dest = ROOT / "benchmarks" / "corpus" / ".cache" / "sources" / name
    try:
        return Path(cs.materialize(src, cs.SNAPSHOTS, dest))
    except cs.Missing as exc:
        pytest.skip(f"{name}: {exc}")


def corpus_script(rel: str) -> Path:
    """A public script of the corpus (benchmarks/corpus/sources.toml's scripts tree, as
    bench_corpus sets it up: ``mnist/main.py``, ``nanogpt/train.py``); the test is skipped
    where its repository's snapshot is not here."""
    return public_file(_corpus_scripts() / rel, "python benchmarks/bench_corpus.py --setup-only")


def pytest_configure(config: pytest.Config) -> None:
    """Run as a background job (``make test &``), a shell starts pytest with SIGINT ignored, every
    process it starts inherits that, and Python then never raises KeyboardInterrupt: a script
    that interrupts itself would run on forever. Restore Python's own handler so the tests'
    processes see SIGINT as in a foreground run (exec resets a handled signal to its default)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# A test that starts a process (gpuopt as a user runs it, a script, a worker pool) takes seconds:
# such a test is marked slow, so `make test-fast` (pytest -m "not slow") leaves it out. A test
# that takes seconds without one (a model captured or replayed, a whole trace read, a search over
# every module) says so itself: @pytest.mark.slow (over 1.4 s, at a load of 10, in --durations).
_STARTS_A_PROCESS = re.compile(
    r"\b(run_gpuopt|subprocess\.|sys\.executable|Popen|ProcessPoolExecutor|multiprocessing)\b"
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``slow`` every test that starts a process: its own code, a fixture it uses, or a
    function of its module that either calls (directly or through each other) does."""
    spawning: dict[str, set[str]] = {}
    for item in items:
        if item.get_closest_marker("slow") or not isinstance(item, pytest.Function):
            continue
        module = item.module
        if module.__name__ not in spawning:
            spawning[module.__name__] = _spawning_names(module)
        names = spawning[module.__name__]
        fixtures = [d.func for defs in item._fixtureinfo.name2fixturedefs.values() for d in defs]
        if any(_starts(f, names) for f in [item.function, *fixtures]):
            item.add_marker(pytest.mark.slow)


@functools.cache
def _source(obj: Any) -> str:
    """Its source, read once (a parametrized test or a shared fixture is asked once per item)."""
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


def _starts(func: Any, names: set[str]) -> bool:
    return _starts_once(func, frozenset(names))


@functools.cache
def _starts_once(func: Any, names: frozenset[str]) -> bool:
    text = _source(func)
    if _STARTS_A_PROCESS.search(text):
        return True
    return bool(names) and any(re.search(rf"\b{re.escape(n)}\b", text) for n in names)


def _spawning_names(module: ModuleType) -> set[str]:
    """The module's top-level functions that start a process, directly or through another."""
    text = _source(module)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    funcs = {
        node.name: ast.get_source_segment(text, node) or ""
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and not node.name.startswith("test_")
    }
    found = {name for name, text in funcs.items() if _STARTS_A_PROCESS.search(text)}
    grew = True
    while grew:
        more = {
            name
            for name, text in funcs.items()
            if name not in found and any(re.search(rf"\b{n}\(", text) for n in found)
        }
        found |= more
        grew = bool(more)
    return found


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
    for folder in ("hta", "kineto_tb_plugin"):
        assert (SHARED_TRACES / folder).is_dir(), f"{SHARED_TRACES / folder} is missing"
    return SHARED_TRACES
