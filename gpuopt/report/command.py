"""``gpuopt report PATH``: load a run directory, a profile.json or Kineto traces into a typed
Profile (:func:`gpuopt.loading.load`), then render it."""

from __future__ import annotations

import sys
from pathlib import Path

from gpuopt.atomic_write import write_atomic
from gpuopt.errors import GpuoptError, fail
from gpuopt.report import format_for_path, get_renderer, print_report


def report_command(path: Path | list[Path], fmt: str | None, output: Path | None) -> None:
    """``path``: one input, or the run directories of one multi-node job's nodes (merged)."""
    from gpuopt.loading import load, load_job

    name = fmt or format_for_path(output) or "text"
    renderer = get_renderer(name)
    paths = path if isinstance(path, list) else [path]
    if output is not None:
        for p in paths:
            check_output(output, p)
    if isinstance(path, list):
        profile = load_job(path)
    elif _optimize_report(path, name, output):
        return
    else:
        profile = load(path)
    if output is None:
        print_report(profile, name)
        return
    try:
        write_atomic(output, renderer.render(profile).encode("utf-8"))
    except OSError as exc:
        raise GpuoptError(f"{output}: cannot write the report: {exc.strerror or exc}") from None
    print(f"wrote {output}", file=sys.stderr)


def _optimize_report(path: Path, fmt: str, output: Path | None) -> bool:
    """A ``gpuopt optimize`` directory (or its ``optimize.json``): rendered, True; else False."""
    from gpuopt.optimize.report import load_optimize, optimize_file, render

    found = optimize_file(path)
    if found is None:
        return False
    text = render(load_optimize(found), fmt)
    if output is None:
        sys.stdout.write(text)
        return True
    try:
        write_atomic(output, text.encode("utf-8"))
    except OSError as exc:
        raise GpuoptError(f"{output}: cannot write the report: {exc.strerror or exc}") from None
    print(f"wrote {output}", file=sys.stderr)
    return True


def check_output(output: Path, path: Path) -> None:
    """Refuse an ``-o`` that is a directory, or that is (or is among) what the report reads."""
    from gpuopt.loading import TRACE_SUFFIXES

    if output.is_dir():
        raise GpuoptError(f"{output}: is a directory; -o takes a file, e.g. {output}/report.html")
    target = output.resolve()
    source = path.resolve()
    read = target == source
    if source.is_dir() and target.is_file() and source in target.parents:
        read = target.name == "profile.json" or target.name.endswith(TRACE_SUFFIXES)
    if read:
        raise GpuoptError(
            f"{output}: is the input this report reads; write the report to another -o FILE"
        )


def run_report(path: Path | list[Path], fmt: str | None, output: Path | None) -> None:
    """The ``report`` command as both entry paths run it (typer's, and gpuopt.entry's fast one):
    bad input ends with a one-line reason and exit code 2."""
    try:
        report_command(path, fmt, output)
    except GpuoptError as exc:
        fail(str(exc))
