"""Run the user's code from private, rewritten copies of some of its files, in place of the files
themselves (``gpuopt optimize``'s candidate runs; the user's files are never touched).

Each overridden file keeps its own name as far as Python can tell: ``__file__``, tracebacks,
sites and ``sys.path[0]`` are those of the original, only the text compiled comes from the copy.
The script itself is compiled from its copy by :func:`gpuopt.script.target.run_script`; modules it
imports are loaded through a finder placed first on ``sys.meta_path`` while the run lasts. A
DataLoader worker started with ``spawn`` re-imports the script from disk, unrewritten (``fork``,
Linux's default, inherits the rewritten code).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import ModuleType

_OVERRIDES: dict[str, str] = {}  # realpath of the user's file -> path of its rewritten copy


def source_for(path: str) -> bytes | None:
    """The rewritten text to compile for the file at ``path``, or None to read the file."""
    copy = _OVERRIDES.get(os.path.realpath(path))
    if copy is None:
        return None
    with open(copy, "rb") as fh:
        return fh.read()


class _CopyLoader(importlib.machinery.SourceFileLoader):
    """Loads a module from its rewritten copy, under the original file's name (no bytecode
    cache: the cached ``.pyc`` beside the original is for the original's text)."""

    def get_data(self, path: str) -> bytes:
        text = source_for(path)
        if text is not None:
            return text
        return super().get_data(path)

    def path_stats(self, path: str) -> Mapping[str, float]:
        raise OSError("no bytecode cache for a rewritten copy")  # and so none is written


class _CopyFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        origin = spec.origin if spec is not None else None
        if spec is None or origin is None or os.path.realpath(origin) not in _OVERRIDES:
            return None
        loader = _CopyLoader(fullname, origin)
        return importlib.util.spec_from_file_location(
            fullname,
            origin,
            loader=loader,
            submodule_search_locations=spec.submodule_search_locations,
        )


@contextmanager
def overridden(copies: Mapping[str, str]) -> Iterator[None]:
    """While the block runs, files in ``copies`` (original path -> copy) load from the copy."""
    if not copies:
        yield
        return
    finder = _CopyFinder()
    _OVERRIDES.update({os.path.realpath(k): v for k, v in copies.items()})
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        _OVERRIDES.clear()
