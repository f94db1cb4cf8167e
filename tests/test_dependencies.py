"""Dependencies are honest: every third-party module gpuopt imports is declared in
pyproject.toml, and nothing is declared that gpuopt does not import; the tests' imports are
declared too (the package's or the ``dev`` extra)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

# import name -> distribution name, where they differ
DISTRIBUTION = {
    "pynvml": "nvidia-ml-py",
    "functorch": "torch",
    "markdown_it": "markdown-it-py",
    "yaml": "pyyaml",
    "sklearn": "scikit-learn",
    "PIL": "pillow",
}
# distributions a declared one brings along and that are used only as a tool, never imported
TOOLS = {"ruff", "mypy", "pytest-xdist"}


# public files put in place at set-up (tests/data/public.toml), never committed: their imports are
# their project's, not this one's
PUBLIC = ROOT / "tests" / "data" / "public"


def _imports(folder: Path) -> set[str]:
    files = [p for p in folder.rglob("*.py") if not p.is_relative_to(PUBLIC)]
    local = {p.stem for p in files}
    found: set[str] = set()
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    third_party = found - set(sys.stdlib_module_names) - local - {"gpuopt"}
    return {DISTRIBUTION.get(m, m) for m in third_party}


def _declared(specs: list[str]) -> set[str]:
    return {re.split(r"[<>=!~ \[;]", s, maxsplit=1)[0].strip().lower() for s in specs}


@pytest.mark.slow
def test_the_package_declares_exactly_what_it_imports() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert _imports(ROOT / "gpuopt") == _declared(project["dependencies"])


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_the_tests_import_only_declared_packages() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _declared(project["dependencies"]) | _declared(
        project["optional-dependencies"]["dev"]
    )
    assert _imports(ROOT / "tests") <= declared
    assert TOOLS <= declared  # the rest of the dev extra: tools the Makefile runs


# import name of a declared dependency whose private modules gpuopt imports on purpose: torch's
# compiler and fake tensors (torch._dynamo, torch._subclasses, ...) are what gpuopt measures
PRIVATE_ALLOWED = {"torch"}


def _requirements() -> list[tuple[str, str, str]]:
    """``(name, lower bound, marker)`` of each runtime dependency."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = []
    for spec in project["dependencies"]:
        req, _, marker = spec.partition(";")
        floor = re.search(r">=\s*([^,\s]+)", req)
        assert floor, f"{spec}: no lower bound"
        found.append((_declared([req]).pop(), floor.group(1), marker.strip()))
    return found


def test_the_floor_pins_are_pyprojects_lower_bounds() -> None:
    """ci/floors.txt (the matrix's floors entry, docs/compatibility.md) pins every runtime
    dependency but torch at exactly its lower bound in pyproject.toml."""
    lines = (ROOT / "ci" / "floors.txt").read_text().splitlines()
    pins = {ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")}
    expected = {
        f"{name}=={floor}" + (f"; {marker}" if marker else "")
        for name, floor, marker in _requirements()
        if name != "torch"
    }
    assert pins == expected, "regenerate: python3 ci/test_matrix.py --print-floors > ci/floors.txt"


def test_the_floors_file_is_what_the_matrix_script_writes() -> None:
    """``ci/test_matrix.py --print-floors`` writes ci/floors.txt as it is, comments and all."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "ci" / "test_matrix.py"), "--print-floors"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert r.stdout == (ROOT / "ci" / "floors.txt").read_text()


def test_every_floor_is_a_release_number() -> None:
    """A floor names a release that was installed and tested (``12.535.77``, not ``12``: the
    floors entry's ``==12`` would look for a release 12.0.0 that nvidia-ml-py never made)."""
    for name, floor, _ in _requirements():
        assert re.fullmatch(r"\d+(\.\d+)+", floor), f"{name}>={floor}"


def test_an_upper_bound_says_why() -> None:
    """An upper bound below the next major version is there for a known break, named beside it."""
    in_deps = False
    for line in (ROOT / "pyproject.toml").read_text().splitlines():
        in_deps = (in_deps or line.startswith("dependencies = [")) and line != "]"
        spec = line.split("#")[0].split(";")[0]
        bound = re.search(r"<\s*([\d.]+)", spec)
        if in_deps and bound and "." in bound.group(1):
            assert "#" in line, f"an upper bound without its reason: {line.strip()}"


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_gpuopt_imports_no_private_module_of_a_dependency() -> None:
    """``typer._click``, ``rich._wrap``, ``pandas._libs``...: a private module can move or go in
    any release within the declared range (typer's ``_click`` exists from 0.26 only)."""
    found = []
    for f in (ROOT / "gpuopt").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                top, *rest = name.split(".")
                private = any(p.startswith("_") and not p.endswith("__") for p in rest)
                if private and top not in PRIVATE_ALLOWED | set(sys.stdlib_module_names) | {
                    "gpuopt"
                }:
                    found.append(f"{f.relative_to(ROOT)}:{node.lineno}: {name}")
    assert not found, found
