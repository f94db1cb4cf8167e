"""The console entry point (``gpuopt``, ``python -m gpuopt``), with one fast path.

``gpuopt report PATH [--format F] [-o FILE]`` is what CI jobs and people run on traces, and its
whole run on a 25-35 MB trace is about 0.35 s, of which importing typer (with the standard-library
modules it pulls in) and building the click command take 25-30 ms (docs/bench-trace.md). So that
one command shape is recognised here, before typer is imported, and runs the very function the
typer command runs (:func:`gpuopt.report.command.run_report`). The recogniser accepts only that
exact shape with values it can check; anything else (``--help``, an unknown or repeated option, a
format that is not one of ours, a value that looks like an option) goes to typer, whose behaviour
and messages stay the reference. tests/test_cli_entry.py checks that typer parses every accepted
command line the same way.

Commands that run no user code end with ``os._exit`` once stdout and stderr are flushed (see
:func:`quick_exit`).
"""

from __future__ import annotations

import os
import sys

FORMATS = ("text", "json", "md", "html")
_OPTIONS = {"--format": "format", "-f": "format", "-o": "output", "--output": "output"}


def parse_report(argv: list[str]) -> tuple[str, str | None, str | None] | None:
    """``(path, format, output)`` when ``argv`` (without the program name) is a plain ``report``
    command line, else None (typer takes it)."""
    if not argv or argv[0] != "report":
        return None
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
        if key in got or not value or value.startswith("-") or (key == "format" and value not in FORMATS):
            return None
        got[key] = value
    if path is None:
        return None
    return path, got.get("format"), got.get("output")


def quick_exit(code: int) -> None:
    """Leave without the interpreter's teardown, once stdout and stderr are flushed.

    Only for commands that ran no user code: tearing the interpreter down (freeing every decoded
    event, numpy's and msgspec's module state) took 0.05-0.07 s after a 50 MB trace, a seventh of
    the whole command. A flush that fails (a closed pipe) returns, and the caller's normal exit
    reports it as Python always has.
    """
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(code)


def main() -> None:
    fast = parse_report(sys.argv[1:])
    if fast is None:
        from gpuopt.cli import main as typer_main

        typer_main()
        return
    from pathlib import Path

    from gpuopt.report.command import run_report

    path, fmt, output = fast
    try:
        run_report(Path(path), fmt, Path(output) if output else None)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            quick_exit(exc.code or 0)
        raise
    except KeyboardInterrupt:
        quick_exit(130)  # as typer ends an interrupted command: 130, no message, no traceback
        raise SystemExit(130) from None
    except BrokenPipeError:  # the reader went away (`| head`): exit 1, as typer does
        os._exit(1)
    quick_exit(0)


if __name__ == "__main__":
    main()
