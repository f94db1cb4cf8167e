"""``gpuopt report PATH``: load a run directory, a profile.json or Kineto traces into a typed
Profile (:func:`gpuopt.loading.load`), then render it."""

from __future__ import annotations

import sys
from pathlib import Path

from gpuopt.atomic_write import write_atomic
from gpuopt.errors import GpuoptError, fail
from gpuopt.report import format_for_path, get_renderer, print_report


def report_command(path: Path, fmt: str | None, output: Path | None) -> None:
    from gpuopt.loading import load

    name = fmt or format_for_path(output) or "text"
    renderer = get_renderer(name)
    profile = load(path)
    if output is None:
        print_report(profile, name)
        return
    write_atomic(output, renderer.render(profile).encode("utf-8"))
    print(f"wrote {output}", file=sys.stderr)


def run_report(path: Path, fmt: str | None, output: Path | None) -> None:
    """The ``report`` command as both entry paths run it (typer's, and gpuopt.entry's fast one):
    bad input ends with a one-line reason and exit code 2."""
    try:
        report_command(path, fmt, output)
    except GpuoptError as exc:
        fail(str(exc))
