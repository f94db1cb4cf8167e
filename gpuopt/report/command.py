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
    if output is not None:
        check_output(output, path)
    if _optimize_report(path, name, output):
        return
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


def _rendered(path: Path, fmt: str) -> str:
    """One input's report as text: a gpuopt optimize directory, or any profile or trace."""
    from gpuopt.loading import load
    from gpuopt.optimize.report import load_optimize, optimize_file, render

    found = optimize_file(path)
    if found is not None:
        return render(load_optimize(found), fmt)
    return get_renderer(fmt).render(load(path))


def reports_command(paths: list[Path], fmt: str | None, output: Path | None) -> None:
    """``gpuopt report A B ...``: each input rendered, one after another. Text and Markdown are
    the single reports joined by a rule; JSON is one array of the documents; HTML one page."""
    if len(paths) == 1:
        report_command(paths[0], fmt, output)
        return
    name = fmt or format_for_path(output) or "text"
    get_renderer(name)  # an unknown format is refused before anything is read
    if output is not None:
        for path in paths:
            check_output(output, path)
    if name == "html":
        text = _html_page(paths)
    elif name == "json":
        texts = [_rendered(path, name).rstrip() for path in paths]
        text = "[\n" + ",\n".join(texts) + "\n]\n"
    else:
        rule = "\n---\n\n" if name == "md" else "\n" + "─" * 80 + "\n\n"
        text = rule.join(_rendered(path, name) for path in paths)
    if output is None:
        sys.stdout.write(text)
        return
    try:
        write_atomic(output, text.encode("utf-8"))
    except OSError as exc:
        raise GpuoptError(f"{output}: cannot write the report: {exc.strerror or exc}") from None
    print(f"wrote {output}", file=sys.stderr)


def _html_page(paths: list[Path]) -> str:
    from gpuopt.loading import load
    from gpuopt.optimize.report import optimize_file
    from gpuopt.report.html import HtmlRenderer

    for path in paths:
        if optimize_file(path) is not None:
            raise GpuoptError(
                f"{path}: a gpuopt optimize directory renders alone in HTML; "
                "give it to gpuopt report by itself"
            )
    return HtmlRenderer().render_many([load(path) for path in paths])


def run_report(path: Path | list[Path], fmt: str | None, output: Path | None) -> None:
    """The ``report`` command as both entry paths run it (typer's, and gpuopt.entry's fast one):
    bad input ends with a one-line reason and exit code 2."""
    try:
        reports_command(path if isinstance(path, list) else [path], fmt, output)
    except GpuoptError as exc:
        fail(str(exc))
