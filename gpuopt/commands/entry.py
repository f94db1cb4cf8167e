"""The console entry point (``gpuopt``, ``python -m gpuopt``), with a fast path.

Importing typer (with the standard-library modules it pulls in) and building the click command
take 25-30 ms. That is a tenth of ``gpuopt report`` on a 25-35 MB trace (docs/bench-trace.md) and
part of the fixed cost ``gpuopt profile`` adds to a training run (docs/bench-profile.md). So the
command lines people type most are parsed here, before typer is imported, with the commands' own
declarations (:mod:`gpuopt.commands.options`), and run through the very functions the typer
commands run with the same values:

* ``gpuopt report PATH... [--format F] [-o FILE]``
  (:func:`gpuopt.commands.report.report_values`);
* ``gpuopt profile [-o DIR] [--quiet] [--force] SCRIPT [ARGS...]``
  (:meth:`gpuopt.runner.options.ProfileOptions.from_values`; everything after SCRIPT is the
  script's, as under typer);
* ``gpuopt check CANDIDATE... --baseline BASELINE... [options]`` with every option of its own
  but ``--debug`` (:func:`gpuopt.commands.check.check_main`): a CI gate is started often, and its
  answer is a tenth of a second behind typer's import.

A declaration's ``fast`` says which options the fast path takes. A leading ``--debug`` (the
global option, :func:`global_debug`) is taken here before them; a ``--debug`` after the command's
name goes to typer, as every option the fast path does not take.

:func:`parse_fast` accepts only command lines whose values it can check as typer would; anything
else (``--help``, any other or a repeated option, a choice not listed, a value that looks like an
option) goes to typer, whose behaviour and messages stay the reference. tests/test_cli_entry.py
and tests/test_check_entry.py check that typer gives the same values for every accepted line.

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

    from gpuopt.commands.options import Command, Opt


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
    from gpuopt.commands.options import COMMANDS

    valued = COMMANDS[argv[0]].valued()
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
            i += 2 if arg in valued else 1
            continue
        if end < len(argv) and argv[end] != "--":
            return [*argv[:end], "--", *argv[end:]]
        return argv
    return argv


def _fast_value(opt: Opt, value: str) -> bool:
    """Whether the fast path takes ``value`` for ``opt`` as typer would: plain text (never empty,
    nor what looks like an option), one of its choices where it has them."""
    return bool(value) and not value.startswith("-") and (not opt.choices or value in opt.choices)


def _fast_option(argv: list[str], i: int, flags: dict[str, Opt]) -> tuple[Opt, object, int] | None:
    """``(option, value, index after it)`` of the option at ``argv[i]``, None where the fast path
    does not take it."""
    arg = argv[i]
    name, eq, text = arg.partition("=")
    opt = flags.get(name if eq else arg)
    if opt is None or not opt.fast:
        return None
    if opt.kind == "flag" and not eq:
        return opt, True, i + 1
    if opt.kind == "switch" and not eq:
        return opt, arg == opt.flags[0], i + 1
    if opt.takes_value and eq and name.startswith("--"):  # `-o=x` is "=x" to click
        return (opt, text, i + 1) if _fast_value(opt, text) else None
    if opt.takes_value and not eq and i + 1 < len(argv) and _fast_value(opt, argv[i + 1]):
        return opt, argv[i + 1], i + 2
    return None


def parse_fast(argv: list[str], decl: Command) -> dict[str, object] | None:
    """The values typer's command would give (by each declaration's ``dest``) when ``argv``
    (without the program name) is a plain ``decl`` command line: its arguments, and only options
    declared ``fast``, each at most once unless repeatable. Anything else is None, and typer
    takes it (``--help``, an unknown or repeated option, a choice not listed, a value that looks
    like an option, a missing argument or required option)."""
    if not argv or argv[0] != decl.name:
        return None
    flags = decl.by_flag()
    given: dict[str, list[object]] = {}  # each option given (by dest): its values
    positional: list[str] = []
    i = 1
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-") and arg:
            if not decl.interspersed:  # the script: the rest is its own
                positional += argv[i:]
                break
            positional.append(arg)
            i += 1
            continue
        got = _fast_option(argv, i, flags)
        if got is None:
            return None
        opt, value, i = got
        seen = given.setdefault(opt.dest, [])
        if seen and opt.kind != "repeat":
            return None  # given twice
        seen.append(value)
    values = decl.defaults()
    for opt in decl.options:
        if opt.dest in given:
            values[opt.dest] = given[opt.dest] if opt.kind == "repeat" else given[opt.dest][0]
    return _with_arguments(decl, values, positional, given)


def _with_arguments(
    decl: Command, values: dict[str, object], positional: list[str], given: dict[str, list[object]]
) -> dict[str, object] | None:
    """``values`` with the positional arguments, or None where an argument or a required option
    is missing, or more arguments came than the command takes."""
    from gpuopt.commands.options import REQUIRED

    if any(o.default is REQUIRED and o.dest not in given for o in decl.options):
        return None
    if len(decl.args) != 1 or not positional:
        return None
    (arg,) = decl.args
    if not arg.many and len(positional) > 1:
        return None
    values[arg.dest] = positional if arg.many else positional[0]
    return values


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


def fast_command(argv: list[str]) -> tuple[str, dict[str, object]] | None:
    """``(command, values)`` where the fast path runs ``argv``, else None (typer takes it)."""
    from gpuopt.commands.options import CHECK, PROFILE, REPORT

    for decl in (PROFILE, CHECK, REPORT):
        values = parse_fast(argv, decl)
        if values is None:
            continue
        if decl is CHECK:
            from gpuopt.commands.check_argv import ambiguous_baseline

            if ambiguous_baseline(argv[1:]):
                return None  # typer's command refuses it, with the reason
        return decl.name, values
    return None


def main() -> None:
    if sys.stderr is None:  # started with fd 2 closed (`2>&-`): Python's stand-in is None, and
        # print(file=None) would put gpuopt's messages on stdout; they go nowhere instead
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - for the process
    argv = global_debug(sys.argv[1:])
    argv = module_args_after_module(argv)
    sys.argv[1:] = argv  # typer reads sys.argv
    fast = fast_command(argv)
    if fast is None:
        from gpuopt.commands.cli import main as typer_main

        typer_main()
        return
    command, values = fast
    if command == "profile":
        _profile(values)
    if command == "check":
        from gpuopt.commands.check import CheckArgs, check_main

        raise SystemExit(_quickly(lambda: check_main(CheckArgs.from_values(values))))
    import gc

    # A report frees almost all it allocates by reference counting: with the cycle collector
    # off, peak memory stays within 1 MB and CPU time is 1-3% lower (docs/bench-trace.md). Off
    # for the process and for the decode helper it forks.
    gc.disable()
    blas = _one_blas_thread()
    heap = _keep_freed_memory()
    try:
        _import_msgspec_alone()
        _decode_early(values)
        from gpuopt.commands.report import report_values

        def report() -> int:
            report_values(values)
            return 0

        _quickly(report)
    finally:  # reached only where the process goes on (a caller in the same process)
        gc.enable()
        if blas:
            os.environ.pop(BLAS_THREADS, None)
        if heap:
            _mallopt(_MMAP_THRESHOLD, _MALLOC_DEFAULT)
            _mallopt(_TRIM_THRESHOLD, _MALLOC_DEFAULT)
        if "gpuopt.trace.decode_ahead" in sys.modules:
            sys.modules["gpuopt.trace.decode_ahead"].discard()


def _import_msgspec_alone() -> None:
    """Import msgspec as it is imported where typing_extensions is not installed: msgspec's own
    fallback, ``typing.get_type_hints``, which gives what typing_extensions' gives msgspec for
    gpuopt's types (no TypedDict's ``Required``; msgspec asks for the extras, which both keep:
    the reports are byte-identical). typing_extensions, and the ``inspect``, ``ast`` and
    ``dis`` it imports, took 5-8 ms of a report's start-up, before the decode helper could be
    forked; nothing else a report runs imports it. Left as it is where either is imported
    already (a caller in the same process)."""
    if "msgspec" in sys.modules or "typing_extensions" in sys.modules:
        return
    sys.modules["typing_extensions"] = None  # type: ignore[assignment]  # ImportError, as if absent
    try:
        import msgspec  # noqa: F401
    except ImportError:  # pragma: no cover - a msgspec that needs it: imported as usual later
        pass
    finally:
        del sys.modules["typing_extensions"]


# numpy's OpenBLAS starts a thread per core when numpy is imported; the thread spins for work a
# report never gives it (no linear algebra): `import numpy` took 125 ms of CPU instead of 90
# (docs/bench-trace.md), taken from the decode helper on a 2-vCPU machine.
BLAS_THREADS = "OPENBLAS_NUM_THREADS"


def _one_blas_thread() -> bool:
    """One OpenBLAS thread for the report's process, unless the environment names a number
    (honoured as it is); True where it was set here, to be removed after the command."""
    if BLAS_THREADS in os.environ:
        return False
    os.environ[BLAS_THREADS] = "1"
    return True


# glibc's mallopt parameters, and the default of both (128 kB).
_TRIM_THRESHOLD = -1
_MMAP_THRESHOLD = -3
_MALLOC_DEFAULT = 128 << 10
# A report's arrays of more than 128 kB-32 MB each get fresh pages from the kernel under glibc's
# defaults, faulted in one by one and given back when freed; kept in the heap and reused instead,
# the Flux.1 capture's report took 24,700 page faults instead of 38,600 and 4-8% less CPU time,
# peak memory within 2 MB (docs/bench-trace.md).
_MMAP_ABOVE = 32 << 20  # the largest threshold glibc takes on 64-bit systems
_TRIM_ABOVE = 1 << 30


def _mallopt(param: int, value: int) -> bool:
    """glibc's ``mallopt``; False where there is none (another C library) or it refuses."""
    import ctypes

    try:
        return bool(ctypes.CDLL(None).mallopt(param, value))
    except (AttributeError, OSError):
        return False


def _keep_freed_memory() -> bool:
    """Serve the report's large arrays from the heap and keep what is freed there for the next
    ones, for the process and the decode helper it forks; True where that was set."""
    if not sys.platform.startswith("linux"):
        return False
    return _mallopt(_MMAP_THRESHOLD, _MMAP_ABOVE) and _mallopt(_TRIM_THRESHOLD, _TRIM_ABOVE)


def _decode_early(values: dict[str, object]) -> None:
    """``gpuopt report TRACE`` of one trace file: fork its decode helper before the report's
    modules are imported (:mod:`gpuopt.trace.decode_ahead`), so that it decodes while they are;
    the loader claims it. Decided from the name alone: anything that is not a large trace file
    gets no helper, or one that is stopped unclaimed."""
    paths = values["paths"]
    if values["summary_only"] or not isinstance(paths, list) or len(paths) != 1:
        return
    name = str(paths[0])
    if not name.endswith((".json.gz", ".json")) or name.endswith((".summary.json", "profile.json")):
        return
    from gpuopt.trace import decode_ahead

    decode_ahead.start(name)


def _profile(values: dict[str, object]) -> NoReturn:
    """Runs user code: a normal exit (atexit handlers, finalizers), never :func:`quick_exit`."""
    from gpuopt.commands.profile import run_profile
    from gpuopt.runner.options import ProfileOptions

    try:
        run_profile(ProfileOptions.from_values(values))
    except KeyboardInterrupt:  # outside the script (the runner handles it inside): as typer ends
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
