"""Dependencies are honest: every third-party module gpuopt imports is declared in
pyproject.toml, and nothing is declared that gpuopt does not import; the tests' imports are
declared too (the package's or the ``dev`` extra)."""

from __future__ import annotations

import ast
import re
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
}
# distributions a declared one brings along and that are used only as a tool, never imported
TOOLS = {"ruff", "mypy", "pytest-xdist"}


def _imports(folder: Path) -> set[str]:
    local = {p.stem for p in folder.rglob("*.py")}
    found: set[str] = set()
    for f in folder.rglob("*.py"):
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


def test_the_tests_import_only_declared_packages() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _declared(project["dependencies"]) | _declared(
        project["optional-dependencies"]["dev"]
    )
    assert _imports(ROOT / "tests") <= declared
    assert TOOLS <= declared  # the rest of the dev extra: tools the Makefile runs
