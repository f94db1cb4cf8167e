"""Which Python frame is "the user's line" for a tensor op, found cheaply on every op.

The recorder sees ops deep inside torch (``nn.Module.__call__`` → ``F.linear`` → the
dispatcher); the line a user can change is the first frame, walking outwards, whose file lies
under one of the run's user roots and not inside torch, gpuopt or an installed package. Walking
the stack with ``traceback``/``inspect`` costs tens of microseconds; here each code object is
classified once and cached, so a walk is a handful of dict lookups.

A site is recorded as the pair ``(id(code), lasti)`` (the code object and the offset of the
calling instruction), which costs nothing to build; file, line and column are derived from it
once, when the run is summarised (:meth:`SiteResolver.position`). Code objects are keyed by
``id`` (kept alive in :attr:`SiteResolver.codes`, so an id is never reused): hashing a code object
hashes its bytecode and constants, and two equal functions in different files compare equal.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import time
from pathlib import Path
from types import CodeType, FrameType

from gpuopt.torch_compat import TRANSPARENT_TORCH_FILES

# Frame categories, cached per code object.
USER = 0  # the user's own code: the site
LIBRARY = 1  # torch, installed packages, the standard library: "called through a library"
TRANSPARENT = 2  # thin wrappers that do not make a call indirect (gpuopt, torch's Tensor shims)
DATA = 3  # torch.utils.data: ops below it belong to data loading, not to the step

# torch's files that sit between the user's line and the recorder without being a library call
# the user made (Tensor methods written in Python, torch/functional.py's one-op wrappers, the
# mode plumbing): torch's file layout, kept with its private names in gpuopt.torch_compat
_TRANSPARENT_TORCH_FILES = TRANSPARENT_TORCH_FILES


# gpuopt's own package directory (this file is gpuopt/sites.py)
GPUOPT_DIR = os.path.dirname(os.path.abspath(__file__))


def _norm_dir(p: str) -> str:
    return os.path.join(os.path.realpath(p), "")


def _installed_dirs() -> tuple[str, ...]:
    """Python's own folders (the standard library, the packages' and the scripts' folders,
    a virtual environment whole): never the user's code, even under a user root (a run from
    a project's root holding its ``.venv``, or from ``/``)."""
    keys = ("stdlib", "platstdlib", "purelib", "platlib", "scripts")
    dirs = {_norm_dir(p) for k, p in sysconfig.get_paths().items() if k in keys}
    if sys.prefix != sys.base_prefix:  # a virtual environment: its bin/ and lib/ alike
        dirs.add(_norm_dir(sys.prefix))
    return tuple(sorted(dirs))


_INSTALLED = _installed_dirs()


def editable_roots() -> list[Path]:
    """The source folders of the projects installed in editable mode into this Python
    (``pip install -e .``: its ``*.dist-info/direct_url.json`` says ``"editable": true`` and
    the folder as a ``file://`` url, whether an ``__editable__`` finder or a ``.pth`` file puts it
    on the path; ``setup.py develop``: an ``*.egg-link`` file, the folder on its first line):
    the user's own code wherever the script runs from (``cd projects/chargpt && python
    chargpt.py`` imports ``mingpt/`` from two folders up). Not a folder inside Python's own
    (``pip install -e git+...`` checks out under the environment) nor gpuopt's own project."""
    out: list[Path] = []
    for site_dir in _site_dirs():
        try:
            entries = list(os.scandir(site_dir))
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("gpuopt-"):
                continue  # gpuopt's own project: the tool, not the user's code
            root = _editable_source(entry.path)
            if root is None or root in out:
                continue
            norm = _norm_dir(str(root))
            if norm.startswith(_INSTALLED) or _norm_dir(GPUOPT_DIR).startswith(norm):
                continue  # the environment's own checkout, or the folder gpuopt runs from
            out.append(root)
    return out


def _site_dirs() -> list[str]:
    """The folders installed packages are read from: Python's, and any on ``sys.path`` named
    like one (a ``.pth`` file may add another environment's)."""
    import site

    dirs = [*site.getsitepackages(), *sys.path]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    seen: list[str] = []
    for d in dirs:
        if (
            os.path.basename(d.rstrip(os.sep)) in ("site-packages", "dist-packages")
            and d not in seen
        ):
            seen.append(d)
    return seen


def _editable_source(path: str) -> Path | None:
    """The source folder an installed distribution's metadata names, when it is editable."""
    import json
    from urllib.parse import unquote, urlparse

    if path.endswith(".egg-link"):
        try:
            with open(path, encoding="utf-8") as f:
                first = f.readline().strip()
        except (OSError, UnicodeDecodeError):
            return None
        return Path(first).resolve() if first and os.path.isdir(first) else None
    if not path.endswith(".dist-info"):
        return None
    try:
        with open(os.path.join(path, "direct_url.json"), encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not (info.get("dir_info") or {}).get("editable"):
        return None
    url = urlparse(str(info.get("url", "")))
    folder = unquote(url.path)
    return Path(folder).resolve() if url.scheme == "file" and os.path.isdir(folder) else None


class SiteResolver:
    """Classifies code objects and finds the first user frame on the stack.

    ``user_roots`` are directories whose files count as user code; ``cwd`` is what sites are made
    relative to. ``extra_user_files`` lets the recorder's calibration count one gpuopt file as
    "user" so that it measures the same walk a real run pays for.
    """

    def __init__(
        self,
        user_roots: list[Path] | list[str],
        cwd: str | None = None,
        extra_user_files: tuple[str, ...] = (),
    ) -> None:
        import torch

        self.cwd = os.path.realpath(cwd or os.getcwd())
        self._roots = tuple(_norm_dir(str(r)) for r in user_roots)
        self._torch_dir = _norm_dir(os.path.dirname(torch.__file__))
        self._gpuopt_dir = _norm_dir(GPUOPT_DIR)
        self._data_dir = os.path.join(self._torch_dir, "utils", "data", "")
        self._transparent = tuple(
            os.path.join(self._torch_dir, f) for f in _TRANSPARENT_TORCH_FILES
        )
        self._extra_user = frozenset(os.path.realpath(f) for f in extra_user_files)
        self.cache: dict[str, int] = {}  # by file name: the category depends on the file only
        self.miss_s = 0.0  # time spent classifying code objects seen for the first time
        self.codes: dict[int, CodeType] = {}  # id -> code, for every code a site refers to
        self._data_callers: dict[int, bool] = {}
        self._abs: dict[str, str] = {}
        self._positions: dict[
            CodeType, list[tuple[int | None, int | None, int | None, int | None]]
        ] = {}

    # -- classification -------------------------------------------------------------------
    def abspath(self, filename: str) -> str:
        p = self._abs.get(filename)
        if p is None:
            p = os.path.realpath(
                filename if os.path.isabs(filename) else os.path.join(self.cwd, filename)
            )
            self._abs[filename] = p
        return p

    def classify(self, code: CodeType) -> int:
        """The category of ``code`` (cached by file): USER, LIBRARY, TRANSPARENT or DATA.

        The first sight of a file costs a path resolution; that time is summed in ``miss_s`` so
        the recorder can take it out of the step it landed in.
        """
        filename = code.co_filename
        cat = self.cache.get(filename)
        if cat is None:
            t0 = time.perf_counter()
            cat = self._classify_file(filename)
            self.cache[filename] = cat
            self.miss_s += time.perf_counter() - t0
        return cat

    def is_user_file(self, filename: str) -> bool:
        """Whether a file (as a traceback or a memory snapshot names it) is the user's code."""
        cat = self.cache.get(filename)
        if cat is None:
            cat = self.cache[filename] = self._classify_file(filename)
        return cat == USER

    def relfile(self, filename: str) -> str:
        """A file name relative to the working directory, or as given when outside it."""
        path = self.abspath(filename)
        base = os.path.join(self.cwd, "")
        return path[len(base) :] if path.startswith(base) else filename

    def classify_file(self, filename: str) -> int:
        """The category of a file by its name (cached), for frames known only by file and line
        (Dynamo's stacks, tracebacks): USER, LIBRARY, TRANSPARENT or DATA."""
        cat = self.cache.get(filename)
        if cat is None:
            cat = self._classify_file(filename)
            self.cache[filename] = cat
        return cat

    def _classify_file(self, filename: str) -> int:
        if not filename or filename.startswith("<"):
            return LIBRARY
        path = self.abspath(filename)
        if path in self._extra_user:
            return USER
        if path.startswith(self._torch_dir):
            if path.startswith(self._data_dir):
                return DATA
            if path.startswith(self._transparent):
                return TRANSPARENT
            return LIBRARY
        if path.startswith(self._gpuopt_dir):
            return TRANSPARENT
        sep = os.sep
        if f"{sep}site-packages{sep}" in path or f"{sep}dist-packages{sep}" in path:
            return LIBRARY
        if path.startswith(_INSTALLED):  # Python's own files, whatever folder holds them
            return LIBRARY
        if path.startswith(self._roots):
            return USER
        return LIBRARY

    # -- the hot path ---------------------------------------------------------------------
    def locate(self, frame: FrameType | None) -> tuple[FrameType | None, bool, bool]:
        """``(user_frame, direct, data)`` for the stack starting at ``frame``.

        ``direct``: no library frame lies between ``frame`` and the user frame (the user's line
        called the tensor API itself). ``data``: the op belongs to data loading (a
        ``torch.utils.data`` frame lies in between, or the user function is one that data
        loading calls, such as a ``Dataset.__getitem__``).
        """
        cache = self.cache
        direct = True
        data = False
        f = frame
        while f is not None:
            code = f.f_code
            cat = cache.get(code.co_filename)
            if cat is None:
                cat = self.classify(code)
            if cat == USER:
                if not data:
                    called_by_data = self._data_callers.get(id(code))
                    if called_by_data is None:
                        t0 = time.perf_counter()
                        called_by_data = self._called_by_data(f)
                        self.codes[id(code)] = code
                        self._data_callers[id(code)] = called_by_data
                        self.miss_s += time.perf_counter() - t0
                    data = called_by_data
                return f, direct, data
            if cat == LIBRARY:
                direct = False
            elif cat == DATA:
                direct = False
                data = True
            f = f.f_back
        return None, False, data

    def _called_by_data(self, frame: FrameType) -> bool:
        """Whether data loading called this user function (decided once per code object)."""
        f = frame.f_back
        while f is not None:
            if self.classify(f.f_code) == DATA:
                return True
            f = f.f_back
        return False

    # -- summarising ----------------------------------------------------------------------
    def relpath(self, code: CodeType) -> str:
        """The file of ``code`` relative to the working directory, or as given when outside it."""
        return self.relfile(code.co_filename)

    def position(
        self, code: CodeType, lasti: int
    ) -> tuple[int, int | None, int | None, int | None]:
        """``(line, col, end_line, end_col)`` of the instruction at byte offset ``lasti``."""
        positions = self._positions.get(code)
        if positions is None:
            positions = _code_positions(code)
            self._positions[code] = positions
        idx = lasti // 2
        if 0 <= idx < len(positions):
            line, end_line, col, end_col = positions[idx]
            if line is not None:
                return line, col, end_line, end_col
        # Fall back to the line table (the instruction carries no position of its own).
        line_no = code.co_firstlineno
        for start, end, ln in code.co_lines():
            if start <= lasti < end and ln is not None:
                line_no = ln
                break
        return line_no, None, None, None

    def site(self, code: CodeType, lasti: int) -> str:
        return f"{self.relpath(code)}:{self.position(code, lasti)[0]}"


def _code_positions(code: CodeType) -> list[tuple[int | None, int | None, int | None, int | None]]:
    """Per code unit (2 bytes) ``(line, end_line, col, end_col)``; Python 3.10 has lines only."""
    if sys.version_info >= (3, 11):
        return list(code.co_positions())
    out: list[tuple[int | None, int | None, int | None, int | None]] = []
    for _start, end, line in code.co_lines():
        while len(out) < end // 2:
            out.append((line, line, None, None))
    return out
