"""``gpuopt report PATH``: load a run directory, a profile.json or Kineto traces, then render."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from gpuopt.errors import GpuoptError, fail
from gpuopt.report import format_for_path, get_renderer, print_report
from gpuopt.schema import load_profile, write_atomic

_TRACE_SUFFIXES = (".json.gz", ".json")


def _looks_like_profile(path: Path) -> bool:
    """A gpuopt profile (not a Kineto trace)? Decided from the first bytes, never a full parse."""
    if path.name == "profile.json":
        return True
    if path.name.endswith(".gz"):
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        raise GpuoptError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return b'"gpuopt.profile/' in head


def load_any(path: Path) -> dict[str, Any]:
    """A profile document from any input ``report`` accepts."""
    if not path.exists():
        raise GpuoptError(f"{path}: no such file or directory")
    if path.is_dir():
        if (path / "profile.json").exists():
            return load_profile(path)
        from gpuopt.trace.profile import profile_from_traces

        return profile_from_traces(path)
    if _looks_like_profile(path):
        return load_profile(path)
    if not path.name.endswith(_TRACE_SUFFIXES):
        raise GpuoptError(
            f"{path}: expected a run directory, profile.json, or a trace .json/.json.gz"
        )
    from gpuopt.trace import early

    early.start(
        path
    )  # decoding begins in a helper while the next line imports numpy and the analyses
    try:
        from gpuopt.trace.profile import profile_from_traces

        return profile_from_traces(path)
    finally:
        early.discard()


def report_command(path: Path, fmt: str | None, output: Path | None) -> None:
    name = fmt or format_for_path(output) or "text"
    renderer = get_renderer(name)
    doc = load_any(path)
    if output is None:
        print_report(doc, name)
        return
    write_atomic(output, renderer.render(doc).encode("utf-8"))
    print(f"wrote {output}", file=sys.stderr)


def run_report(path: Path, fmt: str | None, output: Path | None) -> None:
    """The ``report`` command as both entry paths run it (typer's, and gpuopt.entry's fast one):
    bad input ends with a one-line reason and exit code 2."""
    try:
        report_command(path, fmt, output)
    except GpuoptError as exc:
        fail(str(exc))
