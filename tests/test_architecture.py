"""The house rules of gpuopt's layout, as tests: no import cycle between modules or between
rooms (top-level packages), every room on its floor (a room imports only rooms below it), no
module reads another's private (``_``-prefixed) names, every ``gpuopt`` import names a module
or a name that exists, and the third-party imports of benchmarks/ and examples/ are declared.

Static: the sources are parsed, nothing is imported. Every import counts, a lazy one inside a
function included (it is a dependency all the same); an import under ``if TYPE_CHECKING:`` does
not (it never runs). A failure lists every offending import with its file and line.

GPUOPT_ROOT=/path/to/checkout runs it against another tree (the default: this file's checkout).
"""

from __future__ import annotations

import ast
import os
import re
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("GPUOPT_ROOT") or Path(__file__).resolve().parents[1])
PKG = ROOT / "gpuopt"


def _sources(folder: Path) -> list[Path]:
    """The Python files under ``folder`` but those in hidden folders (``.cache``: public code put
    in place at set-up, never committed; ``.venv``)."""
    return sorted(
        p
        for p in folder.rglob("*.py")
        if not any(x.startswith(".") for x in p.relative_to(folder).parts)
    )


# The floors, ground first: a room may import its own floor's rooms only where no cycle forms
# (checked apart) and any room below. A top-level module is a room of its own. A room not
# listed fails test_every_room_has_a_floor, so a new room is placed on purpose.
FLOORS: list[set[str]] = [
    {  # the ground: helpers every room may use
        "units",
        "errors",
        "defaults",
        "debug",
        "paths",
        "inputs",
        "atomic_write",
        "torch_compat",
        "own_ops",
        "sites",
        "torch_modes",
        "stats",
        "hand_written_trigger",
    },
    {"model"},  # the document's types
    {"trace", "compile", "frameworks", "source", "batching"},  # pure readers of what was measured
    {"memory"},  # the memory model (its probe is in probes/)
    {"probes", "aot"},  # measuring inside the user's process; Nimble's plans
    {"graphs", "script"},  # users' whole-step graphs; running the user's script
    {"assemble"},  # measurements -> one Profile
    {"findings"},  # rules over the Profile
    {"report", "loading"},  # renderers; the one reader of inputs
    {"fixes"},  # each fix: plan, run-time form, codemod
    {"runner"},  # gpuopt profile's run
    {"optimize", "gate"},  # gpuopt optimize's runs, measures and output; gpuopt check/compare
    {"commands"},  # the command line
]
# the package's face: gpuopt/__init__.py (load, step, ...) and __main__.py, above everything
FACE = {"gpuopt", "__main__"}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # the gpuopt module imported (the longest that exists)
    names: tuple[str, ...]  # names taken from it (from X import a, b), empty for `import X`
    line: int
    lazy: bool

    def where(self) -> str:
        return f"{self.module.replace('.', '/')}.py:{self.line}"


@cache
def modules() -> dict[str, Path]:
    out = {}
    for f in sorted(PKG.rglob("*.py")):
        rel = f.relative_to(ROOT).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        out[name] = f
    return out


def _typing_only(tree: ast.Module) -> set[int]:
    skip: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test):
            skip.update(id(x) for x in ast.walk(n))
    return skip


def _lazy(tree: ast.Module) -> set[int]:
    inside: set[int] = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside.update(id(x) for x in ast.walk(n) if x is not n)
    return inside


def _resolve(dotted: str) -> str | None:
    mods = modules()
    while dotted and dotted not in mods:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


@cache
def imports() -> tuple[Import, ...]:
    out: list[Import] = []
    for mod, path in modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip, lazy = _typing_only(tree), _lazy(tree)
        for n in ast.walk(tree):
            if id(n) in skip or not isinstance(n, (ast.Import, ast.ImportFrom)):
                continue
            for target, names in _targets(mod, path, n):
                found = _resolve(target)
                if found and found != mod:
                    out.append(Import(mod, found, names, n.lineno, id(n) in lazy))
    return tuple(out)


def _targets(
    mod: str, path: Path, n: ast.Import | ast.ImportFrom
) -> Iterator[tuple[str, tuple[str, ...]]]:
    if isinstance(n, ast.Import):
        for a in n.names:
            if a.name.split(".")[0] == "gpuopt":
                yield a.name, ()
        return
    base = n.module or ""
    if n.level:
        parts = mod.split(".")
        keep = len(parts) - n.level + (1 if path.name == "__init__.py" else 0)
        base = ".".join(parts[:keep] + ([n.module] if n.module else []))
    if base.split(".")[0] != "gpuopt":
        return
    plain = []
    for a in n.names:
        if f"{base}.{a.name}" in modules():  # a submodule: `from gpuopt.x import module`
            yield f"{base}.{a.name}", ()
        else:
            plain.append(a.name)
    if plain or not n.names:
        yield base, tuple(plain)


def room(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "gpuopt"


def _sccs(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _explain(comp: list[str], edges: list[Import], key: object) -> str:
    members = set(comp)
    lines = [" <-> ".join(comp)]
    for imp in edges:
        a, b = key(imp.module), key(imp.target)  # type: ignore[operator]
        if a in members and b in members and a != b:
            lines.append(f"    {imp.where()} -> {imp.target}{' (lazy)' if imp.lazy else ''}")
    return "\n".join(lines)


def test_no_import_cycle_between_modules() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for imp in imports():
        if imp.module.startswith(imp.target + "."):
            continue  # a package's own __init__, imported by its modules
        graph[imp.module].add(imp.target)
    cycles = _sccs(graph)
    assert not cycles, "\n".join(_explain(c, list(imports()), lambda m: m) for c in cycles)


def test_no_import_cycle_between_rooms() -> None:
    graph: dict[str, set[str]] = defaultdict(set)
    for imp in imports():
        a, b = room(imp.module), room(imp.target)
        if a != b and "gpuopt" not in (a, b):
            graph[a].add(b)
    cycles = _sccs(graph)
    assert not cycles, "\n".join(_explain(c, list(imports()), room) for c in cycles)


def floor_of(name: str) -> int | None:
    for i, rooms in enumerate(FLOORS):
        if name in rooms:
            return i
    return None


def test_every_room_has_a_floor() -> None:
    rooms = {room(m) for m in modules()} - FACE
    assert sorted(r for r in rooms if floor_of(r) is None) == []


def test_every_room_imports_only_rooms_below_it() -> None:
    up = []
    for imp in imports():
        a, b = room(imp.module), room(imp.target)
        fa, fb = floor_of(a), floor_of(b)
        if a == b or a in FACE or b in FACE or fa is None or fb is None:
            continue
        if fb > fa:
            up.append(f"{imp.where()}: {a} (floor {fa}) -> {imp.target} (floor {fb})")
    assert up == [], "imports that run up a floor:\n" + "\n".join(up)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_module_reads_another_modules_private_names() -> None:
    found = []
    for imp in imports():
        found += [f"{imp.where()}: {imp.target}.{n}" for n in imp.names if _private(n)]
        if _private(imp.target.rpartition(".")[2]):
            found.append(f"{imp.where()}: the private module {imp.target}")
    found += _private_attributes()
    assert found == [], "private names read across modules:\n" + "\n".join(found)


def _private_attributes() -> list[str]:
    """``module._name`` where ``module`` is a gpuopt module bound by an import."""
    out = []
    for mod, path in modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bound: dict[str, str] = {}
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                for a in n.names:
                    if a.name.startswith("gpuopt.") and a.asname:
                        bound[a.asname] = a.name
            elif isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("gpuopt"):
                for a in n.names:
                    if f"{n.module}.{a.name}" in modules():
                        bound[a.asname or a.name] = f"{n.module}.{a.name}"
        for n in ast.walk(tree):
            if (
                isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Name)
                and n.value.id in bound
                and bound[n.value.id] != mod
                and _private(n.attr)
            ):
                out.append(f"{mod.replace('.', '/')}.py:{n.lineno}: {bound[n.value.id]}.{n.attr}")
    return out


def _defined(mod: str) -> set[str]:
    """Top-level names a module binds (definitions, assignments, imports)."""
    tree = ast.parse(modules()[mod].read_text(encoding="utf-8"))
    names: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in n.names}
    return names


def test_every_gpuopt_import_names_something_that_exists() -> None:
    """After a move: no import of a module or a name that is not there (mypy would say it too,
    but only of gpuopt/; this reads tests/, benchmarks/ and examples/ as well)."""
    missing = []
    files = [p for d in ("gpuopt", "tests", "benchmarks", "examples") for p in _sources(ROOT / d)]
    for f in files:
        if "corpus" in f.parts or "public" in f.parts:
            continue
        try:
            tree = ast.parse(f.read_text(encoding="utf-8"))
        except SyntaxError:
            continue
        for n in ast.walk(tree):
            if (
                isinstance(n, ast.ImportFrom)
                and n.level == 0
                and n.module
                and n.module.split(".")[0] == "gpuopt"
            ):
                if n.module not in modules():
                    missing.append(f"{f.relative_to(ROOT)}:{n.lineno}: no module {n.module}")
                    continue
                have = _defined(n.module)
                for a in n.names:
                    if (
                        a.name != "*"
                        and a.name not in have
                        and f"{n.module}.{a.name}" not in modules()
                    ):
                        missing.append(
                            f"{f.relative_to(ROOT)}:{n.lineno}: {n.module} has no {a.name}"
                        )
            elif isinstance(n, ast.Import):
                for a in n.names:
                    if a.name.split(".")[0] == "gpuopt" and a.name not in modules():
                        missing.append(f"{f.relative_to(ROOT)}:{n.lineno}: no module {a.name}")
    assert missing == [], "\n".join(missing)


def test_module_strings_name_modules_that_exist() -> None:
    """``-m gpuopt.x`` children, ``monkeypatch.setattr("gpuopt.x.y", ...)`` targets: a string
    naming a gpuopt module, or a name in one, that is not there is a move that missed it."""
    pattern = re.compile(r"[\"'](?:-m )?(gpuopt(?:\.[A-Za-z_]\w*)+)(?=[\"':])")
    missing = []
    for d in ("gpuopt", "tests", "benchmarks"):
        for f in _sources(ROOT / d):
            if f.name == "test_architecture.py":
                continue  # its own docstring names an example
            for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
                if "logger(" in line or "_FAMILY =" in line:
                    continue  # a logger's or a schema family's name, not a module path
                for mt in pattern.finditer(line):
                    dotted = mt.group(1)
                    head = _resolve(dotted) or "gpuopt"
                    rest = dotted[len(head) + 1 :].split(".")[0]
                    if rest and rest not in _defined(head) and "__getattr__" not in _defined(head):
                        missing.append(f"{f.relative_to(ROOT)}:{i}: {dotted}")
    assert missing == [], "\n".join(missing)


tomllib = pytest.importorskip("tomllib")  # Python 3.11+
from test_dependencies import DISTRIBUTION  # noqa: E402 - import name -> distribution, one map


def _third_party(folder: Path) -> dict[str, str]:
    """The third-party imports of ``folder``'s own files, each with the file that makes it."""
    local = {p.stem for p in _sources(folder)} | {p.name for p in folder.rglob("*") if p.is_dir()}
    found: dict[str, str] = {}
    for f in _sources(folder):
        try:
            tree = ast.parse(f.read_text(encoding="utf-8"))
        except SyntaxError:
            continue
        for n in ast.walk(tree):
            names = (
                [a.name for a in n.names]
                if isinstance(n, ast.Import)
                else (
                    [n.module]
                    if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module
                    else []
                )
            )
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in local and top != "gpuopt":
                    found.setdefault(
                        DISTRIBUTION.get(top, top).lower(), f"{f.relative_to(ROOT)}:{n.lineno}"
                    )
    return found


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        specs += extra
    return {re.split(r"[<>=!~ \[;]", s, maxsplit=1)[0].strip().lower() for s in specs}


@pytest.mark.parametrize("folder", ["benchmarks", "examples"])
def test_benchmarks_and_examples_import_only_declared_packages(folder: str) -> None:
    undeclared = {d: at for d, at in _third_party(ROOT / folder).items() if d not in _declared()}
    assert undeclared == {}, "\n".join(f"{at}: {d}" for d, at in sorted(undeclared.items()))
