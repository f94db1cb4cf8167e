"""Whose code a Python frame runs: a framework's own (its installed packages, from the specs), the
user's, torch's, or another library's; and which phase of a framework's loop (training,
validation, the sanity check) a stack is in.

Nothing here imports a framework: a package's directory comes from the module already in
``sys.modules`` (a framework the script never imported owns no frame).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable, Mapping
from types import FrameType, ModuleType
from typing import Any

from gpuopt.frameworks import FrameworkSpec
from gpuopt.frameworks.detect import REGISTRY

# the framework modules this file reads (detect's registry): each declares SPEC, and may declare
# PHASES and EVALUATION (its loop's phases), CALLS (its settings call), STEP_KNOBS and
# recognise(modules)
SPEC_MODULES = REGISTRY

USER = "user"
TORCH = "torch"
OTHER = "other"  # the standard library, another installed package: its caller owns its time

MAX_FRAMES = 200  # frames a phase lookup walks at most


def spec_modules() -> list[Any]:
    return [importlib.import_module(name) for name in SPEC_MODULES]


# every package a spec names: a run that imported none of them runs through no framework
SPEC_PACKAGES = frozenset(pkg for m in spec_modules() for pkg in m.SPEC.packages)


def package_dir(module: ModuleType) -> str | None:
    """The directory of an imported package (with a trailing separator), None for a module
    without a file."""
    paths = list(getattr(module, "__path__", []) or [])
    if paths:
        return os.path.join(os.path.realpath(str(paths[0])), "")
    file = getattr(module, "__file__", None)
    return os.path.join(os.path.dirname(os.path.realpath(file)), "") if file else None


def framework_dirs(
    modules: Mapping[str, Any], all_specs: Iterable[FrameworkSpec]
) -> list[tuple[str, str]]:
    """``(directory, framework name)`` of every spec's package the run imported."""
    out: list[tuple[str, str]] = []
    for spec in all_specs:
        for pkg in spec.packages:
            mod = modules.get(pkg)
            where = package_dir(mod) if isinstance(mod, ModuleType) else None
            if where:
                out.append((where, spec.name))
    return out


class Owners:
    """Classifies a file name as a framework's (by name), the user's, torch's or another's;
    cached by file name. ``is_user`` says whether a file is the user's (the run's resolver)."""

    def __init__(
        self,
        dirs: list[tuple[str, str]],
        torch_dir: str | None,
        is_user: Callable[[str], bool],
    ) -> None:
        self._dirs = sorted(dirs, key=lambda d: -len(d[0]))  # the deepest directory first
        self._torch = torch_dir
        self._is_user = is_user
        self._cache: dict[str, str] = {}

    def owner(self, filename: str) -> str:
        got = self._cache.get(filename)
        if got is None:
            got = self._cache[filename] = self._classify(filename)
        return got

    def _classify(self, filename: str) -> str:
        if not filename or filename.startswith("<"):
            return OTHER
        path = os.path.realpath(filename)
        for where, name in self._dirs:
            if path.startswith(where):
                return name
        if self._torch and path.startswith(self._torch):
            return TORCH
        return USER if self._is_user(filename) else OTHER

    def stack_owner(self, filenames: Iterable[str]) -> str:
        """Who owns the time of a stack (file names, innermost first): the innermost frame that
        is a framework's, the user's or torch's (the standard library and other packages run on
        their caller's behalf); OTHER where none is."""
        for name in filenames:
            got = self.owner(name)
            if got != OTHER:
                return got
        return OTHER


def phase_of(frame: FrameType | None, table: Iterable[tuple[str, str, str]]) -> str | None:
    """The phase a stack is in: the first row of ``table`` ``(phase, file suffix, function or
    "")`` that a frame of the stack (from ``frame`` outwards) matches; None where none does."""
    rows = list(table)
    found: set[int] = set()
    f, depth = frame, 0
    while f is not None and depth < MAX_FRAMES:
        code = f.f_code
        for i, (_, suffix, func) in enumerate(rows):
            if code.co_filename.endswith(suffix) and (not func or code.co_name == func):
                found.add(i)
        f, depth = f.f_back, depth + 1
    return rows[min(found)][0] if found else None


class Phases:
    """The phase tables of the frameworks the run imported, read at a batch's fetch or a module
    call: ``phase(frame)`` and ``evaluating(frame)`` (a batch that is no training step)."""

    def __init__(self, modules: Mapping[str, Any]) -> None:
        self.table: list[tuple[str, str, str]] = []
        self.evaluation: set[str] = set()
        for mod in spec_modules():
            if any(pkg in modules for pkg in mod.SPEC.packages):
                self.table += list(getattr(mod, "PHASES", ()))
                self.evaluation |= set(getattr(mod, "EVALUATION", ()))

    def phase(self, frame: FrameType | None) -> str | None:
        return phase_of(frame, self.table) if self.table else None

    def evaluating(self, frame: FrameType | None) -> bool:
        return self.phase(frame) in self.evaluation


def python_split(
    python: Mapping[tuple[tuple[int, int], ...], float],
    codes: Mapping[int, Any],
    owners: Owners,
) -> dict[str, float]:
    """The sampled time (seconds by stack of ``(id(code), lasti)``, innermost first; ``codes``
    by id) by who owns it: a framework's name, USER, TORCH or OTHER."""
    out: dict[str, float] = {}
    for stack, seconds in python.items():
        names = [codes[cid].co_filename for cid, _ in stack if cid in codes]
        who = owners.stack_owner(names)
        out[who] = out.get(who, 0.0) + seconds
    return out


def call_line(source: str, names: Iterable[str], before: int | None = None) -> int | None:
    """The line of the call to one of ``names`` (``Trainer``, ``L.Trainer``: the callee as
    written) in ``source``: the last one at or before line ``before`` where there is one, else
    the first; None where the source has none (or does not parse)."""
    import ast

    wanted = set(names)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    lines = sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _callee(node.func) in wanted
    )
    if not lines:
        return None
    earlier = [n for n in lines if before is not None and n <= before]
    return earlier[-1] if earlier else lines[0]


def _callee(func: Any) -> str:
    import ast

    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        inner = _callee(func.value)
        return f"{inner}.{func.attr}" if inner else ""
    return ""
