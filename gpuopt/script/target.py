"""Run a script or module exactly as ``python SCRIPT ARGS`` / ``python -m MODULE ARGS`` would.

Same ``sys.argv`` (``argv[0]`` as given), ``sys.path[0]`` (the script's directory, or the working
directory for ``-m``), ``__name__ == "__main__"`` and an absolute ``__file__`` (as Python 3.9+
sets it). The script runs in this process so that probes see its tensors and DataLoaders;
spawn-started DataLoader workers re-import it as ``__mp_main__`` just as under plain python.
"""

from __future__ import annotations

import atexit
import importlib.util
import io
import os
import pkgutil
import runpy
import signal
import sys
import threading
import traceback
import types
import zipfile
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import FrameType
from typing import Any

from msgspec import Struct

from gpuopt.debug import logger
from gpuopt.errors import GpuoptError, say
from gpuopt.model.outcome import Outcome
from gpuopt.model.profile import RunError
from gpuopt.probes.steps import StopRun
from gpuopt.script.held_sigterm import sigterm_pending
from gpuopt.script.sources import source_for
from gpuopt.sites import GPUOPT_DIR

log = logger(__name__)


class Terminated(BaseException):
    """SIGTERM arrived: unwind the script like Ctrl-C does, so the profile is still written."""


class Target(Struct):
    """What to run: a script path or a module name, and its arguments."""

    script: str | None
    module: str | None
    args: list[str]

    @property
    def display(self) -> str:
        return self.script if self.script is not None else f"-m {self.module}"

    @property
    def stem(self) -> str:
        if self.script is not None:
            return Path(self.script).stem or "script"
        return (self.module or "module").rsplit(".", 1)[-1]

    def files(self) -> list[Path]:
        """The files this target reads that an output must never be (the script)."""
        return [Path(self.script)] if self.script is not None else []

    def user_roots(self) -> list[Path]:
        """Directories whose files are the user's code (for sites): the script's folder (a
        directory run as a script: itself; ``-m``: the working directory) and, when the script
        lies below the working directory, that directory too: a project's script run from the
        project's root (``python projects/chargpt/chargpt.py``) imports the project's own
        packages from there (``mingpt/model.py``), and those are the user's code as much; and
        the source folders of the projects installed in editable mode (``pip install -e .``),
        wherever the script runs from (``cd projects/chargpt && python chargpt.py``)."""
        from gpuopt.sites import editable_roots

        cwd = Path.cwd().resolve()
        if self.script is None:
            roots = [cwd]
        else:
            path = Path(self.script).resolve()
            root = path if os.path.isdir(self.script) else path.parent
            roots = [root, cwd] if root != cwd and root.is_relative_to(cwd) else [root]
        return roots + [r for r in editable_roots() if r not in roots]


def main_spec(path: str) -> ModuleSpec | None:
    """The ``__main__`` module python runs for ``python PATH`` when PATH is a directory or a zip
    archive (found as python finds it: PATH as a sys.path entry); None for a script file."""
    abs_path = os.path.abspath(path)
    if not os.path.isdir(abs_path) and not _is_zip(abs_path):
        return None
    importer = pkgutil.get_importer(abs_path)
    find = getattr(importer, "find_spec", None)
    return find("__main__") if find is not None else None


def _is_zip(path: str) -> bool:
    try:
        return os.path.isfile(path) and zipfile.is_zipfile(path)
    except OSError as exc:
        log.debug("%s not read as a zip archive: %s", path, exc)
        return False


def main_file(script: str) -> Path | None:
    """The file holding the code ``python SCRIPT`` runs first: the script, a directory's
    ``__main__.py``; None inside a zip archive."""
    spec = main_spec(script)
    if spec is None:
        return Path(script)
    origin = spec.origin or ""
    return Path(origin) if os.path.isfile(origin) else None


def check_target(target: Target) -> None:
    """Refuse a missing script, a directory, or an unknown module before anything runs."""
    if target.script is not None:
        p = Path(target.script)
        if not p.exists():
            raise GpuoptError(
                f"{target.script}: no such file; give the path of a Python script, e.g. "
                "gpuopt profile train.py"
            )
        if not os.access(p, os.R_OK):
            raise GpuoptError(f"{target.script}: permission denied")
        if p.is_dir() and main_spec(target.script) is None:
            raise GpuoptError(
                f"{target.script}: is a directory without __main__.py, so python cannot run "
                "it either; to run a package use gpuopt profile -m PACKAGE"
            )
        return
    assert target.module is not None
    saved = sys.path[0]
    sys.path[0] = os.getcwd()
    try:
        spec = importlib.util.find_spec(target.module)
    except (ImportError, ValueError) as exc:
        raise GpuoptError(f"-m {target.module}: cannot find module ({exc})") from None
    finally:
        sys.path[0] = saved
    if spec is None:
        raise GpuoptError(
            f"-m {target.module}: no module named {target.module!r} "
            f"(is it importable from {os.getcwd()}?)"
        )


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


def run_script(path: str) -> None:
    """Run a script file as ``python path`` does: ``__main__`` is a fresh module whose
    ``__file__`` is the absolute path, while ``sys.argv[0]`` stays as given (``runpy.run_path``
    would replace it with the path it was given). A directory or a zip archive runs its
    ``__main__`` module, as python runs it (its spec named ``__main__``, ``__package__`` '')."""
    abs_path = os.path.abspath(path)
    spec = main_spec(path)
    if spec is not None:
        _run_main(spec)
        return
    source = source_for(abs_path)  # a rewritten private copy (gpuopt optimize's candidate)
    if source is None:
        with io.open_code(abs_path) as fh:
            source = fh.read()
    # dont_inherit: this module's ``from __future__`` flags must not reach the user's code
    code = compile(source, abs_path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=abs_path, __cached__=None, __loader__=None, __package__=None, __spec__=None
    )
    _exec_as_main(code, main)


def _run_main(spec: ModuleSpec) -> None:
    """A directory's or a zip archive's ``__main__``, in a fresh ``__main__`` module."""
    origin = spec.origin or ""
    source = source_for(origin) if origin else None
    loader: Any = spec.loader
    if source is not None:
        code = compile(source, origin, "exec", dont_inherit=True)
    else:
        code = loader.get_code("__main__")
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=origin, __cached__=spec.cached, __loader__=loader, __package__="", __spec__=spec
    )
    _exec_as_main(code, main)


def _exec_as_main(code: types.CodeType, main: types.ModuleType) -> None:
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def run_target(target: Target) -> Outcome:
    """Run the target in this process; never raises (but for gpuopt's own BaseExceptions, which
    unwind the script on purpose)."""
    saved_argv = sys.argv[:]
    saved_path0 = sys.path[0] if sys.path else None
    handlers = signal_handlers()
    prev_term: Any = None
    try:
        prev_term = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError as exc:  # not the main thread (tests driving the runner from a thread)
        log.debug("no SIGTERM handler (%s)", exc)
        prev_term = None
    try:
        if sigterm_pending():  # came while gpuopt was starting: the script does not start
            raise Terminated
        if target.script is not None:
            sys.argv = [target.script, *target.args]
            entry = main_spec(target.script) is not None  # a directory or a zip: on the path
            absolute = os.path.abspath(target.script)
            sys.path[0] = absolute if entry else os.path.dirname(absolute)
            try:
                run_script(target.script)
            finally:
                defer_late_signals(handlers)
        else:
            assert target.module is not None
            # runpy replaces argv[0] with the module's file, as python -m does
            sys.argv = [target.module, *target.args]
            sys.path[0] = os.getcwd()
            try:
                runpy.run_module(target.module, run_name="__main__", alter_sys=True)
            finally:
                defer_late_signals(handlers)
        return Outcome("ok", 0)
    except StopRun:
        return Outcome("ok", 0, stopped_by_steps=True)
    except SystemExit as exc:
        return exit_outcome(exc.code)
    except KeyboardInterrupt:
        interrupted = RunError(type="KeyboardInterrupt", message="interrupted")
        return Outcome("interrupted", 130, interrupted)
    except Terminated:  # SIGTERM: 128 + 15, as a shell reports a process it ended
        return Outcome("interrupted", 143, RunError(type="SIGTERM", message="terminated"))
    except BaseException as exc:  # any other: the script's, as python ends on it (exit code 1)
        if _unwinds_on_purpose(exc):
            raise
        print_user_traceback(exc)
        error = RunError(type=type(exc).__name__, message=safe_str(exc)[:2000])
        frames = [(f.filename, f.lineno or 0) for f in traceback.extract_tb(exc.__traceback__)]
        return Outcome("error", 1, error, error_frames=frames)
    finally:
        sys.argv = saved_argv
        if saved_path0 is not None:
            sys.path[0] = saved_path0
        if prev_term is not None:
            try:
                signal.signal(signal.SIGTERM, prev_term)
            except ValueError as exc:
                log.debug("SIGTERM's handler not restored: %s", exc)


# The script's own signal handlers, wrapped once it has ended: signal -> the handler it set
_late_handlers: dict[int, Any] = {}
_late_errors: list[BaseException] = []
_flush_at_exit: list[bool] = []


def signal_handlers() -> dict[int, Any]:
    """Every signal's Python-level handler now (to tell the script's own from those before)."""
    out: dict[int, Any] = {}
    for sig in signal.valid_signals():
        try:
            out[sig] = signal.getsignal(sig)
        except (OSError, ValueError):
            continue
    return out


def defer_late_signals(before: dict[int, Any]) -> None:
    """The script has ended: a signal handler it set (one not in ``before``: torch's SIGCHLD
    handler, raising "DataLoader worker (pid N) is killed by signal" for a worker that died)
    must not raise into gpuopt writing the profile. Each still runs when its signal comes, as
    under python; what it raises is kept, and said by :func:`flush_late_signals` once the
    profile is written, as python says it while the process ends. A handler that fires before
    the wrap raises in the script, as under python inside its last lines."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig, handler in signal_handlers().items():
        if handler is before.get(sig) or not callable(handler):
            continue
        if handler is signal.default_int_handler or sig in _late_handlers:
            continue
        if getattr(handler, "__module__", "").startswith("gpuopt."):
            continue  # gpuopt's own (SIGTERM's while the script runs)
        try:
            signal.signal(sig, _kept(handler))
        except (OSError, ValueError, RuntimeError) as exc:
            log.debug("signal %s's handler not wrapped: %s", sig, exc)
            continue
        _late_handlers[sig] = handler
    if _late_handlers and not _flush_at_exit:
        _flush_at_exit.append(True)
        atexit.register(flush_late_signals)  # for a caller that does not flush itself


def _kept(handler: Callable[[int, FrameType | None], Any]) -> Callable[[int, Any], None]:
    def late(signum: int, frame: Any) -> None:
        handling = sys.exc_info()[1]  # gpuopt's own handling of how the script ended, if any
        try:
            handler(signum, frame)
        except BaseException as exc:  # noqa: BLE001 - the script's handler's, said at the end
            if handling is not None and exc.__context__ is handling:
                exc.__context__ = None  # python raises it at its exit, outside any handling
            _late_errors.append(exc)

    return late


def flush_late_signals() -> None:
    """The script's handlers back in place; what they raised since the script ended printed as
    python prints an error while the process ends (its traceback, the exit code unchanged)."""
    for sig, handler in list(_late_handlers.items()):
        try:
            signal.signal(sig, handler)
        except (OSError, ValueError, RuntimeError) as exc:
            log.debug("signal %s's handler not restored: %s", sig, exc)
    _late_handlers.clear()
    while _late_errors:
        late = _late_errors.pop(0)
        if not isinstance(late, SystemExit):  # python's exit says nothing of a sys.exit
            print_user_traceback(late)


def exit_status(code: int) -> int:
    """The status the process really exits with for ``sys.exit(code)``: its low byte (256 is 0,
    -1 is 255), 255 beyond what a C long holds, as CPython ends."""
    if -(1 << 63) <= code < 1 << 63:
        return code & 0xFF
    return 255


def exit_outcome(code: object) -> Outcome:
    """How ``sys.exit(code)`` ends the run: an int (a bool too) is the process's status; None is
    0; anything else is printed to stderr, as python does, and the status is 1."""
    if code is None:
        return Outcome("ok", 0)
    if isinstance(code, int):
        status = exit_status(int(code))
        if status == 0:
            return Outcome("ok", 0)
        return Outcome("error", status, RunError(type="SystemExit", message=str(int(code))))
    text = safe_str(code)
    say(text)
    return Outcome("error", 1, RunError(type="SystemExit", message=text[:2000]))


def safe_str(value: object) -> str:
    """``str(value)``, or what python prints when that raises."""
    try:
        return str(value)
    except BaseException as exc:  # noqa: BLE001 - a user's __str__ may raise anything
        log.debug("str() of a %s failed: %r", type(value).__name__, exc)
        return "<exception str() failed>"


def _unwinds_on_purpose(exc: BaseException) -> bool:
    """A BaseException of gpuopt's own (an analysis that stops the script once it has what it
    needs) passes through; every other is the script's."""
    return type(exc).__module__.startswith("gpuopt.")


def _is_ours(filename: str) -> bool:
    return (
        filename.startswith(GPUOPT_DIR + os.sep)
        or filename == runpy.__file__
        or filename.endswith(("runpy.py", "<frozen runpy>"))
    )


def print_user_traceback(exc: BaseException) -> None:
    """The script's own traceback, as ``python`` would print it: gpuopt's and runpy's frames
    removed (the outermost ones that ran the script, and any in between, such as a probe's
    wrapper around ``DataLoader.__next__``), unless the error is raised in gpuopt itself. A
    stderr the script closed gets nothing, as under python."""
    te = traceback.TracebackException(type(exc), exc, exc.__traceback__, compact=True)
    _strip_ours(te, set())
    try:
        sys.stderr.write("".join(te.format()))
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError) as exc:
        log.debug("the script's traceback not written: %s", exc)


def _strip_ours(te: traceback.TracebackException, seen: set[int]) -> None:
    """gpuopt's frames out of ``te`` and of every exception chained to it."""
    if id(te) in seen:
        return
    seen.add(id(te))
    frames = list(te.stack)
    while frames and _is_ours(frames[0].filename):
        frames.pop(0)
    if frames and not _is_ours(frames[-1].filename):  # raised in the user's code or a library
        frames = [f for f in frames if not _is_ours(f.filename)]
    te.stack = traceback.StackSummary.from_list(frames)
    chained = [te.__cause__, te.__context__, *(getattr(te, "exceptions", None) or [])]
    for other in chained:
        if other is not None:
            _strip_ours(other, seen)
