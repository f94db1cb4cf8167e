"""gpuopt's diagnostics: ``--debug`` and ``GPUOPT_DEBUG=1`` (docs/debugging.md).

Every module logs through ``log = logger(__name__)``: the standard :mod:`logging` module's
``gpuopt.*`` hierarchy, quiet by default (a ``NullHandler`` on ``gpuopt``, never a handler on the
root logger). With debugging on, the ``gpuopt`` logger alone gets a handler that writes each
line to stderr as ``gpuopt: debug: <module>: <message>`` (a traceback: each of its lines
prefixed), and stops passing records up (``propagate`` off), so the logging the user's script
sets up in the same process neither sees gpuopt's lines nor is changed.

In the gpuopt command's own process (:func:`isolate`), the ``gpuopt`` logger never passes its
records to the user's handlers: a script that configures the root logger at DEBUG prints under
``gpuopt profile`` what it prints under ``python``. Imported as a library, gpuopt's loggers
behave as any library's.

:mod:`logging` is imported only once debugging is on or something else (torch, the user's
script) has imported it, so ``gpuopt report`` does not pay for its import (2-3 ms measured):
before then, no handler can exist that would receive a record.

The setting reaches every child process gpuopt starts (torchrun's ranks, ``gpuopt optimize``'s
runs and analyses) through the environment variable, which :func:`enable` sets.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    import logging
    from pathlib import Path

ENV = "GPUOPT_DEBUG"
PREFIX = "gpuopt: debug: "
ROOT = "gpuopt"
# the libraries whose versions a debug run names, besides torch (read from the installed
# distributions' metadata, never imported: an import runs the package's own code)
FRAMEWORKS = (
    "transformers",
    "accelerate",
    "lightning",
    "pytorch_lightning",
    "timm",
    "datasets",
    "numpy",
)
_OFF = ("", "0", "false", "no", "off")

_on = False  # this process writes debug lines
_isolated = False  # this process is the gpuopt command: its records never reach the user's
_ready = False  # the gpuopt logger has its NullHandler (logging is imported)
_said: set[tuple[str, str]] = set()  # the messages debug_once has logged
# the lines written before a run directory could keep them (at most EARLY_LINES), then the file
EARLY_LINES = 10_000
_early: list[str] = []
_file: TextIO | None = None
_tag = ""  # which process of several wrote a line: "rank 1: " (torchrun's ranks)


def wanted(environ: Any = None) -> bool:
    """Whether ``GPUOPT_DEBUG`` asks for debug lines (any value but empty, 0, false, no, off)."""
    env = os.environ if environ is None else environ
    return str(env.get(ENV, "")).strip().lower() not in _OFF


def enabled() -> bool:
    """Whether this process writes debug lines."""
    return _on


class Log:
    """A module's logger: ``logging.getLogger(name)``, looked up on the first record that
    anything could receive (see the module's docstring)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def debug(self, msg: str, *args: object, exc_info: bool | BaseException = False) -> None:
        """``logging.Logger.debug``: ``log.debug("...: %s", exc)``."""
        if _on or "logging" in sys.modules:
            _logging().getLogger(self.name).debug(msg, *args, exc_info=exc_info, stacklevel=2)

    def debug_once(self, msg: str, *args: object, exc_info: bool | BaseException = False) -> None:
        """:meth:`debug` the first time this module logs ``msg`` (the template), for a place a
        run can reach once per op or per sample."""
        if not (_on or "logging" in sys.modules) or (self.name, msg) in _said:
            return
        log = _logging().getLogger(self.name)
        if log.isEnabledFor(10):  # logging.DEBUG: said once where someone listens
            _said.add((self.name, msg))
            log.debug(msg + " (said once)", *args, exc_info=exc_info, stacklevel=2)

    def enabled(self) -> bool:
        """Whether a debug record would be written somewhere (to skip building a costly one)."""
        if not (_on or "logging" in sys.modules):
            return False
        return bool(_logging().getLogger(self.name).isEnabledFor(10))  # logging.DEBUG


def logger(name: str) -> Log:
    """The logger of module ``name`` (``logger(__name__)``; under the ``gpuopt`` hierarchy)."""
    return Log(name if name == ROOT or name.startswith(ROOT + ".") else f"{ROOT}.{name}")


def _logging() -> Any:
    """The :mod:`logging` module, the ``gpuopt`` logger set up once: its ``NullHandler``."""
    import logging

    global _ready
    if not _ready:
        _ready = True
        root = logging.getLogger(ROOT)
        if not any(isinstance(h, logging.NullHandler) for h in root.handlers):
            root.addHandler(logging.NullHandler())
        if _isolated:
            root.propagate = False
    return logging


def isolate() -> None:
    """This process is the gpuopt command: the ``gpuopt`` records never reach the handlers of
    the user's script (which runs in it), debugging on or off."""
    global _isolated
    _isolated = True
    if _ready:
        _logging().getLogger(ROOT).propagate = False


def from_env() -> None:
    """Turn debugging on when ``GPUOPT_DEBUG`` asks for it (every gpuopt entry point calls
    this first)."""
    if wanted():
        enable()


def enable() -> None:
    """Debug lines to stderr, in this process and in every child it starts (the environment
    variable carries it), then the versions a bug report needs."""
    global _on
    os.environ[ENV] = "1"
    if _on:
        return
    _on = True
    root = _logging().getLogger(ROOT)
    root.addHandler(_stderr_handler())
    root.setLevel(10)  # logging.DEBUG
    root.propagate = False
    log = logger(ROOT)
    for line in versions():
        log.debug("%s", line)


def tag(name: str) -> None:
    """Name this process in its debug lines (``gpuopt: debug: rank 1: ...``), for one process
    of several that write to the same stderr."""
    global _tag
    _tag = f"{name}: " if name else ""


def disable() -> None:
    """Debug lines off again (tests, a notebook): the handler :func:`enable` added removed, the
    ``gpuopt`` logger as before, the environment variable unset."""
    global _on, _file
    os.environ.pop(ENV, None)
    _early.clear()
    if _file is not None:
        _file.close()
        _file = None
    if not _on:
        return
    _on = False
    root = _logging().getLogger(ROOT)
    for h in [h for h in root.handlers if getattr(h, "gpuopt_debug", False)]:
        root.removeHandler(h)
    root.setLevel(0)  # logging.NOTSET
    root.propagate = not _isolated


def keep_in(directory: Path) -> Path | None:
    """With debugging on: the debug lines so far, and every one from now on, also in
    ``directory/debug.log`` (``debug-2.log``, ... when that name is taken: a file is only ever
    created, never replaced). The file's path, or None (debugging off, or a file already kept)."""
    global _file
    if not _on or _file is not None:
        return None
    for n in range(1, 100):
        path = directory / ("debug.log" if n == 1 else f"debug-{n}.log")
        try:
            fh = open(path, "x", encoding="utf-8")  # noqa: SIM115 - open while the process runs
        except FileExistsError:
            continue
        except OSError as exc:
            logger(ROOT).debug("the debug lines not kept in %s: %s", path, exc)
            return None
        fh.write("".join(_early))
        fh.flush()
        _early.clear()
        _file = fh
        logger(ROOT).debug("these lines are also in %s", path)
        return path
    return None


def _keep(text: str) -> None:
    """A debug record's lines, for :func:`keep_in`'s file (kept in memory until there is one)."""
    if _file is None:
        if len(_early) < EARLY_LINES:
            _early.append(text)
        return
    try:
        _file.write(text)
        _file.flush()
    except (OSError, ValueError):  # a full disk, a closed file: the lines still go to stderr
        pass


def versions() -> list[str]:
    """What a bug report needs first: gpuopt's, Python's and the installed frameworks' versions
    (torch's build is said where torch is imported: :func:`torch_build`)."""
    import platform

    from gpuopt import __version__

    return [
        f"gpuopt {__version__}, Python {platform.python_version()} ({sys.executable}) on "
        f"{platform.platform()}",
        f"pid {os.getpid()}, argv {sys.argv!r}",
        "installed: " + ", ".join(installed(("torch", *FRAMEWORKS))),
    ]


def installed(names: tuple[str, ...]) -> list[str]:
    """``name version`` (or ``name not installed``) for each distribution, from its metadata:
    nothing is imported."""
    from importlib import metadata

    out = []
    for name in names:
        try:
            out.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            out.append(f"{name} not installed")
    return out


def torch_build() -> str:
    """``torch 2.13.0+cpu, CUDA none`` (``CUDA 12.8``; ``ROCm 6.3`` on a ROCm build), or why
    torch cannot be imported."""
    try:
        import torch
    except Exception as exc:  # a broken install raises more than ImportError
        return f"torch not importable ({type(exc).__name__}: {exc})"
    version = getattr(torch, "version", None)
    cuda = getattr(version, "cuda", None)
    hip = getattr(version, "hip", None)
    build = f"CUDA {cuda or 'none'}" + (f", ROCm {hip}" if hip else "")
    return f"torch {torch.__version__}, {build}"


def say_torch() -> None:
    """Log torch's build and what it sees (once torch is imported: a run that profiles)."""
    log = logger(ROOT)
    if not log.enabled():
        return
    log.debug("%s", torch_build())
    try:
        import torch

        cuda = torch.cuda.is_available()
        count = torch.cuda.device_count() if cuda else 0
        names = [torch.cuda.get_device_name(i) for i in range(count)]
        log.debug("torch.cuda.is_available() %s, %d device(s) %s", cuda, count, names)
    except Exception as exc:  # a broken driver: the report says what the run found
        log.debug("torch's devices not read: %s: %s", type(exc).__name__, exc)


def _stderr_handler() -> logging.Handler:
    """A handler that writes each record as ``gpuopt: debug: <module>: <line>`` on the stderr
    of the moment (a script may replace ``sys.stderr``), never failing: a closed stderr loses
    the line."""
    import logging

    class StderrLines(logging.Handler):
        gpuopt_debug = True  # what disable() removes

        def emit(self, record: logging.LogRecord) -> None:
            where = record.name[len(ROOT) + 1 :] if record.name.startswith(ROOT + ".") else ""
            head = PREFIX + _tag + (f"{where}: " if where else "")
            try:
                text = self.format(record)
            except Exception:  # arguments the message cannot take: logging's own report
                self.handleError(record)
                return
            lines = "".join(f"{head}{line}\n" for line in text.splitlines() or [""])
            _keep(lines)
            err = sys.stderr if sys.stderr is not None else sys.__stderr__
            if err is None:
                return
            try:
                err.write(lines)
                err.flush()
            except (OSError, ValueError):
                pass

    handler = StderrLines()
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler
