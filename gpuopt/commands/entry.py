"""The console entry point (``gpuopt``, ``python -m gpuopt``), with three fast paths.

Importing typer (with the standard-library modules it pulls in) and building the click command
take 25-30 ms. That is a tenth of ``gpuopt report`` on a 25-35 MB trace (docs/bench-trace.md) and
part of the fixed cost ``gpuopt profile`` adds to a training run (docs/bench-profile.md). So the
three command shapes started most often are recognised here, before typer is imported, and run the
very functions the typer commands run:

* ``gpuopt report PATH [--format F] [-o FILE]`` (:func:`gpuopt.commands.report.run_report`);
* ``gpuopt profile [-o DIR] [--quiet] [--force] SCRIPT [ARGS...]``
  (:func:`gpuopt.commands.profile.run_profile`; everything after SCRIPT is the script's,
  as under typer);
* ``gpuopt check CANDIDATE... --baseline BASELINE... [options]`` with its own options, each with
  a value (``--allow`` and ``--baseline`` repeatable, the others, ``-o`` / ``--output`` counted
  as one, at most once) or the flags
  ``--strict`` / ``--no-strict`` (:func:`gpuopt.commands.check.check_main`): a CI gate is
  started often, and its answer is a tenth of a second behind typer's import.

A leading ``--debug`` (the global option, :func:`global_debug`) is taken here before them; a
``--debug`` after the command's name goes to typer, as every option the fast paths do not know.

The recognisers accept only those exact shapes with values they can check; anything else
(``--help``, any other or a repeated option, a format that is not one of ours, a value that looks
like an option) goes to typer, whose behaviour and messages stay the reference.
tests/test_cli_entry.py checks that typer parses every accepted command line the same way.

Commands that run no user code end with ``os._exit`` once stdout and stderr are flushed (see
:func:`gpuopt.commands.quick_exit.quick_exit`).
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, NoReturn

from gpuopt.commands.quick_exit import exit_quickly_on, quick_exit

# gpuopt's first line in the process: a profile's start-up cost counts from here
STARTED_AT = time.perf_counter()

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpuopt.commands.check import CheckArgs
    from gpuopt.runner.options import ProfileOptions

_OPTIONS = {"--format": "format", "-f": "format", "-o": "output", "--output": "output"}
# gpuopt profile's options that take a value (the module's own arguments start after -m MODULE).
_PROFILE_VALUED = {
    "-o",
    "--out",
    "--steps",
    "--warmup",
    "--window",
    "--sample-interval",
    "--nproc-per-node",
    "--format",
    "--fixes",
    "--seed",
    "--memory-for",
    "--fix",
    "--baseline",
    "--time-budget",
    "--nnodes",
    "--node-rank",
    "--rdzv-backend",
    "--rdzv-endpoint",
    "--rdzv-id",
    "--master-addr",
    "--master-port",
    "--max-restarts",
    "--torchrun-arg",
}


def global_debug(argv: list[str]) -> list[str]:
    """The command line without its leading ``--debug`` (gpuopt's global option, before the
    command's name), debugging turned on when it or ``GPUOPT_DEBUG`` asks for it; the fast
    paths then run as without it. ``--debug`` after the command's name is that command's own
    option, which typer takes."""
    from gpuopt import debug

    debug.isolate()
    n = 0
    while n < len(argv) and argv[n] == "--debug":
        n += 1
    if n:
        debug.enable()
    else:
        debug.from_env()
    return argv[n:]


def module_args_after_module(argv: list[str]) -> list[str]:
    """``profile ... -m MODULE ARGS`` with ``--`` put before ARGS, so that every argument after
    the module name is the module's own (``--help`` included), as with ``python -m MODULE``."""
    if not argv or argv[0] not in ("profile", "optimize", "run"):
        return argv
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--" or not arg.startswith("-"):
            return argv  # the script form: everything after SCRIPT is already the script's
        if arg == "-m" and i + 1 < len(argv):
            end = i + 2
        elif arg.startswith("-m") and not arg.startswith("--"):
            end = i + 1  # -mMODULE
        else:
            i += 2 if arg in _PROFILE_VALUED else 1
            continue
        if end < len(argv) and argv[end] != "--":
            return [*argv[:end], "--", *argv[end:]]
        return argv
    return argv


def parse_report(argv: list[str]) -> tuple[str, str | None, str | None] | None:
    """``(path, format, output)`` when ``argv`` (without the program name) is a plain ``report``
    command line, else None (typer takes it)."""
    if not argv or argv[0] != "report":
        return None
    from gpuopt.report import FORMATS  # the report command imports it anyway

    path: str | None = None
    got: dict[str, str] = {}
    i = 1
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if eq and name in ("--format", "--output"):
            i += 1
        elif arg in _OPTIONS:
            if i + 1 >= len(argv):
                return None
            name, value = arg, argv[i + 1]
            i += 2
        elif arg.startswith("-") or path is not None or not arg:
            return None
        else:
            path = arg
            i += 1
            continue
        key = _OPTIONS[name]
        if (
            key in got
            or not value
            or value.startswith("-")
            or (key == "format" and value not in FORMATS)
        ):
            return None
        got[key] = value
    if path is None:
        return None
    return path, got.get("format"), got.get("output")


def parse_profile(argv: list[str]) -> ProfileOptions | None:
    """The options when ``argv`` is a plain ``profile`` command line (``-o DIR``, ``--quiet``,
    ``--force``, each at most once, then SCRIPT), else None (typer takes it)."""
    if not argv or argv[0] != "profile":
        return None
    from pathlib import Path

    from gpuopt.runner.options import ProfileOptions

    out: str | None = None
    flags: set[str] = set()
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg in ("--quiet", "--force") and arg not in flags:
            flags.add(arg)
            i += 1
            continue
        name, eq, value = arg.partition("=")
        if eq and name == "--out":
            i += 1
        elif arg in ("-o", "--out") and i + 1 < len(argv):
            value = argv[i + 1]
            i += 2
        elif arg.startswith("-") or not arg:
            return None
        else:  # the script; the rest is its own
            return ProfileOptions(
                script=arg,
                module=None,
                args=argv[i + 1 :],
                out=Path(out) if out else None,
                quiet="--quiet" in flags,
                force="--force" in flags,
            )
        if out is not None or not value or value.startswith("-"):
            return None
        out = value
    return None


_CHECK_REPEATABLE = ("--baseline", "--allow")


def _check_options(argv: list[str]) -> tuple[list[str], dict[str, list[str]]] | None:
    """``(paths, {option: [values]})`` of a ``check`` command line, None for anything but
    positional paths, options of :data:`gpuopt.commands.check_argv.VALUED` with a plain value, and
    the strict flags."""
    from gpuopt.commands.check_argv import VALUED

    paths: list[str] = []
    got: dict[str, list[str]] = {}
    i = 1
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if arg in ("--strict", "--no-strict"):
            name, value = "--strict", "true" if arg == "--strict" else "false"
            i += 1
        elif eq and name in VALUED and name.startswith("--"):  # `-o=x` is "=x" to click
            i += 1
        elif arg in VALUED and i + 1 < len(argv):
            name, value = arg, argv[i + 1]
            i += 2
        elif arg.startswith("-") or not arg:
            return None
        else:
            paths.append(arg)
            i += 1
            continue
        values = got.setdefault("--output" if name == "-o" else name, [])
        if (values and name not in _CHECK_REPEATABLE) or not value or value.startswith("-"):
            return None
        values.append(value)
    return paths, got


def parse_check(argv: list[str]) -> CheckArgs | None:
    """The arguments when ``argv`` is a plain ``check`` command line, else None (typer takes
    it: ``--help``, an unknown or repeated option, a format that is not one of ours, ...)."""
    if not argv or argv[0] != "check":
        return None
    parsed = _check_options(argv)
    if parsed is None:
        return None
    from gpuopt.commands.check_argv import SETTINGS, ambiguous_baseline

    if ambiguous_baseline(argv[1:]):
        return None  # typer's command refuses it, with the reason
    paths, got = parsed
    fmt = got.get("--format", [None])[0]
    if not paths or "--baseline" not in got or fmt not in (None, "text", "md", "json"):
        return None
    from gpuopt.commands.check import CheckArgs

    def one(name: str) -> str | None:
        return got[name][0] if name in got else None

    strict = one("--strict")
    return CheckArgs(
        candidate=paths,
        baseline=got["--baseline"],
        flags={name[2:]: one(name) for name in SETTINGS},
        allow=got.get("--allow", []),
        strict=None if strict is None else strict == "true",
        config=one("--config"),
        junit=one("--junit"),
        fmt=fmt,
        output=one("--output"),
    )


def _quickly(command: Callable[[], int]) -> int:
    """Run a command that runs no user code, and end without the interpreter's teardown; the
    exit code comes back only where that could not be done (a flush failed)."""
    try:
        code = command()
    except SystemExit as exc:
        exit_quickly_on(exc)
        raise
    except KeyboardInterrupt:
        quick_exit(130)  # as typer ends an interrupted command: 130, no message, no traceback
        raise SystemExit(130) from None
    except BrokenPipeError:  # the reader went away (`| head`): exit 1, as typer does
        os._exit(1)
    quick_exit(code)
    return code


def main() -> None:
    if sys.stderr is None:  # started with fd 2 closed (`2>&-`): Python's stand-in is None, and
        # print(file=None) would put gpuopt's messages on stdout; they go nowhere instead
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - for the process
    argv = global_debug(sys.argv[1:])
    argv = module_args_after_module(argv)
    sys.argv[1:] = argv  # typer reads sys.argv
    prof = parse_profile(argv)
    if prof is not None:
        _profile(prof)
    check = parse_check(argv)
    if check is not None:
        from gpuopt.commands.check import check_main

        raise SystemExit(_quickly(lambda: check_main(check)))
    fast = parse_report(argv)
    if fast is None:
        from gpuopt.commands.cli import main as typer_main

        typer_main()
        return
    import gc
    from pathlib import Path

    # A report frees almost all it allocates by reference counting: with the cycle collector
    # off, peak memory stays within 1 MB and CPU time is 1-3% lower (docs/bench-trace.md). Off
    # for the process and for the decode helper it forks.
    gc.disable()
    from gpuopt.commands.report import run_report

    path, fmt, output = fast

    def report() -> int:
        run_report(Path(path), fmt, Path(output) if output else None)
        return 0

    _quickly(report)


def _profile(opts: ProfileOptions) -> NoReturn:
    """Runs user code: a normal exit (atexit handlers, finalizers), never :func:`quick_exit`."""
    from gpuopt.commands.profile import run_profile

    try:
        run_profile(opts)
    except KeyboardInterrupt:  # outside the script (the runner handles it inside): as typer ends
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
