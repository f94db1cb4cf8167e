"""Which training framework a run goes through, read from what ran: the framework modules in
``sys.modules`` and the stack at a step boundary, from the user's line into the framework's code
(``trainer.train()`` → ``Trainer.train`` → ... → ``optimizer.step``).

The frameworks are the modules in :data:`REGISTRY`, each declaring a ``SPEC``; they are imported
on first use, and none imports its framework. Nothing here imports a framework either: a
framework's files are found from its package's directory in ``sys.modules``.
"""

from __future__ import annotations

import ast
import functools
import importlib
import linecache
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from types import FrameType
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field

from gpuopt.frameworks import FrameworkSpec, Knob

if TYPE_CHECKING:
    from gpuopt.model.records import DataLoaderInfo, Framework, FrameworkPhase

# the framework modules, outermost first: where a Trainer (transformers) runs on accelerate, the
# outermost framework on the stack is the one the user called; gpuopt.frameworks.frames reads
# the same list (phases, whose code a frame is)
REGISTRY: tuple[str, ...] = (
    "gpuopt.frameworks.transformers",
    "gpuopt.frameworks.accelerate",
    "gpuopt.frameworks.lightning",  # runs on none of these; before timm, recognised first
    "gpuopt.frameworks.timm",
)


@functools.cache
def specs() -> tuple[FrameworkSpec, ...]:
    """Every registered framework's spec (each module imported once, on first use)."""
    return tuple(importlib.import_module(m).SPEC for m in REGISTRY)


def recognised(modules: Mapping[str, Any]) -> FrameworkCapture | None:
    """The framework a run imported, for a run whose step boundaries had no framework code on
    the stack (timm's ``train.py`` steps its optimizer itself): the first registered module's
    ``recognise(modules)`` that finds one (its name and version), else None."""
    for name in REGISTRY:
        found = getattr(importlib.import_module(name), "recognise", None)
        fw = found(modules) if found is not None else None
        if fw is not None:
            return FrameworkCapture(name=fw.name, version=fw.version, entry=None, function="")
    return None


def spec_named(name: str) -> FrameworkSpec | None:
    return next((s for s in specs() if s.name == name), None)


def _package_dirs() -> list[tuple[str, FrameworkSpec]]:
    """The directories of the framework packages imported so far, with their spec."""
    out: list[tuple[str, FrameworkSpec]] = []
    for spec in specs():
        for pkg in spec.packages:
            mod = sys.modules.get(pkg)
            path = getattr(mod, "__file__", None) if mod is not None else None
            if path:
                out.append((os.path.join(os.path.dirname(os.path.realpath(path)), ""), spec))
    return out


class FrameworkFiles:
    """Which framework a file belongs to, by its path (cached per file name)."""

    def __init__(self) -> None:
        self._dirs = _package_dirs()
        self._cache: dict[str, FrameworkSpec | None] = {}

    def refresh(self) -> None:
        """Read the imported framework packages again (one imported after this was made)."""
        self._dirs = _package_dirs()
        self._cache.clear()

    def of(self, filename: str) -> FrameworkSpec | None:
        if filename in self._cache:
            return self._cache[filename]
        found = None
        if filename and not filename.startswith("<"):
            path = os.path.realpath(filename)
            found = next((s for d, s in self._dirs if path.startswith(d)), None)
        self._cache[filename] = found
        return found


class FrameworkCapture(Struct):
    """What the probe saw: the framework's name, version, the user's line that entered it, the
    framework function it entered and where the user's code sets the framework's settings
    (``{"TrainingArguments": "train.py:44"}``)."""

    name: str
    version: str | None
    entry: str | None
    function: str
    settings_at: dict[str, str] = field(default_factory=dict)


class Seen(Struct):
    """A framework seen on the stack at a step boundary."""

    spec: FrameworkSpec
    entry: str | None  # the user's line that called into the framework (None: none on the stack)
    function: str  # the framework's function that line called (``Trainer.train``)
    user_files: list[str] = field(default_factory=list)  # the user's files on that stack


def seen_on_stack(
    frame: FrameType | None,
    files: FrameworkFiles,
    is_user: Callable[[str], bool],
    site: Callable[[FrameType], str],
) -> Seen | None:
    """The outermost framework frame on the stack from ``frame`` outwards, with the user's line
    that called it; None where no framework's code is on the stack."""
    found: Seen | None = None
    inner: tuple[FrameworkSpec, FrameType] | None = None  # the last framework frame walked
    user_files: list[str] = []
    f = frame
    while f is not None:
        filename = f.f_code.co_filename
        spec = files.of(filename)
        if spec is not None:
            inner = (spec, f)
        elif is_user(filename):
            if filename not in user_files:
                user_files.append(filename)
            if inner is not None:
                found = Seen(inner[0], site(f), _qualname(inner[1]))
                inner = None
        f = f.f_back
    if inner is not None:  # framework code with no user line outside it (a framework's CLI)
        found = Seen(inner[0], None, _qualname(inner[1]))
    if found is not None:
        found.user_files = user_files
    return found


def _qualname(frame: FrameType) -> str:
    return str(getattr(frame.f_code, "co_qualname", frame.f_code.co_name))


def version_of(spec: FrameworkSpec) -> str | None:
    mod = sys.modules.get(spec.packages[0])
    v = getattr(mod, "__version__", None)
    return str(v) if v is not None else None


def settings_sites(
    files: Iterable[str], calls: Iterable[str], rel: Callable[[str], str]
) -> dict[str, str]:
    """The first line of each of ``calls`` (``TrainingArguments``) in the user's ``files``, by
    their source (``TrainingArguments(...)``, ``transformers.TrainingArguments(...)``):
    ``{call: "train.py:44"}``."""
    wanted = set(calls)
    out: dict[str, str] = {}
    for path in files:
        tree = _parse(path)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = _callee(node.func)
                if name in wanted and name not in out:
                    out[name] = f"{rel(path)}:{node.lineno}"
    return out


def _callee(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


@functools.lru_cache(maxsize=64)
def _parse_cached(path: str, size: int, mtime: float) -> ast.Module | None:
    try:
        with open(path, encoding="utf-8") as f:
            return ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None


def _parse(path: str) -> ast.Module | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _parse_cached(path, st.st_size, st.st_mtime)


def knob_for_read(spec: FrameworkSpec, filename: str, line: int) -> Knob | None:
    """The framework setting that removes a host read at ``filename:line`` of its code: a
    ``sync-in-step`` knob whose argument the condition guarding the read tests
    (``if self.args.logging_nan_inf_filter and (torch.isnan(loss) ...)``)."""
    knobs = [k for k in spec.knobs if k.finding == "sync-in-step"]
    if not knobs:
        return None
    tree = _parse(filename)
    if tree is None:
        return None
    for test in _guards(tree, line):
        text = ast.unparse(test)
        for k in knobs:
            if f".{k.argument}" in text:
                return k
    return None


def _guards(tree: ast.Module, line: int) -> list[ast.expr]:
    """The conditions of the ``if``/``while`` statements and conditional expressions whose
    condition holds ``line`` or whose body does, innermost first."""
    out: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            end = node.test.end_lineno or node.test.lineno
            if node.lineno <= line <= end:  # the statement's first line up to its condition's end
                out.append(node.test)
            elif isinstance(node, (ast.If, ast.While)) and node.body:
                first, last = node.body[0].lineno, node.body[-1].end_lineno or 0
                if first <= line <= last:
                    out.append(node.test)
    out.sort(key=lambda t: -t.lineno)
    return out


def source_line(filename: str, line: int) -> str:
    return linecache.getline(filename, line).strip()


def package_path(path: str) -> str:
    """An installed package's file from its package's folder (``transformers/trainer.py``); any
    other file as given."""
    for marker in ("site-packages", "dist-packages"):
        token = f"{os.sep}{marker}{os.sep}"
        if token in path:
            return path.rsplit(token, 1)[1]
    return path


def framework_record(
    seen: FrameworkCapture, train_steps: int, loaders: list[DataLoaderInfo] | None
) -> Framework:
    """The document's ``framework`` from what the framework probe saw: the training phase's
    steps (the optimizer's), and the evaluation's batches (its DataLoaders', autograd off)."""
    from gpuopt.model.records import Framework

    return Framework(
        name=seen.name,
        version=seen.version,
        entry=seen.entry,
        phases=_phases(train_steps, loaders or []),
        settings_at=dict(seen.settings_at),
    )


def _phases(train_steps: int, loaders: list[DataLoaderInfo]) -> list[FrameworkPhase]:
    from gpuopt.model.records import FrameworkPhase, given

    phases = [FrameworkPhase(name="train", steps=train_steps)]
    evals = [d for d in loaders if given(d.role) == "eval"]
    if evals:
        phases.append(FrameworkPhase(name="eval", steps=sum(int(d.batches) for d in evals)))
    return phases


LOADER_ARGUMENTS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor")


def loader_knobs(spec: FrameworkSpec) -> dict[str, Knob]:
    """The framework's settings of the DataLoaders it builds, by the DataLoader argument each
    sets (``num_workers`` -> ``TrainingArguments(dataloader_num_workers=...)``)."""
    out: dict[str, Knob] = {}
    for k in spec.knobs:
        for arg in LOADER_ARGUMENTS:
            if k.argument == arg or k.argument.endswith("_" + arg):
                out.setdefault(arg, k)
    return out


def loader_origins(fw: Framework, loaders: list[DataLoaderInfo]) -> None:
    """A DataLoader the framework built (inside ``trainer.train()``): its settings are the
    framework's, so ``built_at`` is the user's call that sets them (``TrainingArguments(...)``)
    and ``built_via`` the user's line into the framework. One built by an evaluation function
    of the framework (``Trainer.get_eval_dataloader``, an entry whose name says eval, test or
    predict) is an evaluation loader (``role: "eval"``), autograd on or off; the phases are
    counted again."""
    from gpuopt.model.records import given

    spec = spec_named(fw.name)
    if spec is None:
        return
    evals = {e for e in spec.entries if any(w in e.lower() for w in ("eval", "test", "predict"))}
    for d in loaders:
        if evals & set(given(d.built_in) or []):
            d.role = "eval"
    train = next((p.steps for p in fw.phases if p.name == "train"), 0)
    fw.phases = _phases(train, loaders)
    knobs = loader_knobs(spec)
    call = next(iter(knobs.values())).call if knobs else None
    site = fw.settings_at.get(call) if call is not None else None
    if call is None or site is None:
        return
    for d in loaders:
        built = given(d.built_at)
        if built is None or built == fw.entry:
            d.built_at, d.settings_call = site, call
            if fw.entry is not None:
                d.built_via = fw.entry
