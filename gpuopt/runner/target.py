"""Run a script or module exactly as ``python SCRIPT ARGS`` / ``python -m MODULE ARGS`` would.

Same ``sys.argv`` (``argv[0]`` as given), ``sys.path[0]`` (the script's directory, or the working
directory for ``-m``), ``__name__ == "__main__"`` and an absolute ``__file__`` (as Python 3.9+
sets it). The script runs in this process so that probes see its tensors and DataLoaders;
spawn-started DataLoader workers re-import it as ``__mp_main__`` just as under plain python.
"""

from __future__ import annotations

import importlib.util
import io
import os
import runpy
import signal
import sys
import traceback
import types
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from gpuopt.assemble.run_record import Outcome
from gpuopt.errors import GpuoptError
from gpuopt.model.profile import RunError
from gpuopt.probes.sites import GPUOPT_DIR
from gpuopt.probes.steps import StopRun
from gpuopt.runner.sources import source_for


class Terminated(BaseException):
    """SIGTERM arrived: unwind the script like Ctrl-C does, so the profile is still written."""


@dataclass
class Target:
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

    def user_roots(self) -> list[Path]:
        """Directories whose files are the user's code (for sites)."""
        if self.script is not None:
            return [Path(self.script).resolve().parent]
        return [Path.cwd().resolve()]


def check_target(target: Target) -> None:
    """Refuse a missing script, a directory, or an unknown module before anything runs."""
    if target.script is not None:
        p = Path(target.script)
        if not p.exists():
            raise GpuoptError(
                f"{target.script}: no such file; give the path of a Python script, e.g. "
                "gpuopt profile train.py"
            )
        if p.is_dir():
            raise GpuoptError(
                f"{target.script}: is a directory, not a script; to run a package use "
                "gpuopt profile -m PACKAGE"
            )
        if not os.access(p, os.R_OK):
            raise GpuoptError(f"{target.script}: permission denied")
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
    would replace it with the path it was given)."""
    abs_path = os.path.abspath(path)
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
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def run_target(target: Target) -> Outcome:
    """Run the target in this process; never raises (but for BaseExceptions we do not own)."""
    saved_argv = sys.argv[:]
    saved_path0 = sys.path[0] if sys.path else None
    prev_term: Any = None
    try:
        prev_term = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread (tests driving the runner from a thread)
        prev_term = None
    try:
        if target.script is not None:
            sys.argv = [target.script, *target.args]
            sys.path[0] = os.path.dirname(os.path.abspath(target.script))
            run_script(target.script)
        else:
            assert target.module is not None
            # runpy replaces argv[0] with the module's file, as python -m does
            sys.argv = [target.module, *target.args]
            sys.path[0] = os.getcwd()
            runpy.run_module(target.module, run_name="__main__", alter_sys=True)
        return Outcome("ok", 0)
    except StopRun:
        return Outcome("ok", 0, stopped_by_steps=True)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return Outcome("ok", 0)
        if isinstance(code, int):  # a bool too: sys.exit(True) exits 1, as in python
            code = int(code)
            return Outcome(
                "ok" if code == 0 else "error",
                code,
                None if code == 0 else RunError(type="SystemExit", message=str(code)),
            )
        print(code, file=sys.stderr)
        return Outcome("error", 1, RunError(type="SystemExit", message=str(code)))
    except KeyboardInterrupt:
        interrupted = RunError(type="KeyboardInterrupt", message="interrupted")
        return Outcome("interrupted", 130, interrupted)
    except Terminated:  # SIGTERM: 128 + 15, as a shell reports a process it ended
        return Outcome("interrupted", 143, RunError(type="SIGTERM", message="terminated"))
    except Exception as exc:
        print_user_traceback(exc)
        error = RunError(type=type(exc).__name__, message=str(exc)[:2000])
        frames = [(f.filename, f.lineno or 0) for f in traceback.extract_tb(exc.__traceback__)]
        return Outcome("error", 1, error, error_frames=frames)
    finally:
        sys.argv = saved_argv
        if saved_path0 is not None:
            sys.path[0] = saved_path0
        if prev_term is not None:
            try:
                signal.signal(signal.SIGTERM, prev_term)
            except ValueError:
                pass


def _is_ours(filename: str) -> bool:
    return (
        filename.startswith(GPUOPT_DIR)
        or filename == runpy.__file__
        or filename.endswith(("runpy.py", "<frozen runpy>"))
    )


def print_user_traceback(exc: BaseException) -> None:
    """The script's own traceback, as ``python`` would print it: gpuopt's and runpy's frames
    removed (those before the script's and those a probe's wrapper put between two of its
    frames, such as the memory probe's ``Module.__call__`` in the first step)."""
    tb: TracebackType | None = exc.__traceback__
    while tb is not None and _is_ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    keep = tb
    while keep is not None:
        nxt = keep.tb_next
        while nxt is not None and _is_ours(nxt.tb_frame.f_code.co_filename):
            nxt = nxt.tb_next
        if nxt is not keep.tb_next:
            keep.tb_next = nxt
        keep = nxt
    traceback.print_exception(type(exc), exc, tb, file=sys.stderr)
    sys.stderr.flush()
