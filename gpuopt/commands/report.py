"""``gpuopt report PATH...``: load a run directory, a profile.json, Kineto traces or rank
summaries into a typed Profile (:func:`gpuopt.loading.load_paths`), then render it; or, with
``--summary-only``, write one summary per rank of the traces (``gpuopt.summary/1``)."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuopt import inputs
from gpuopt.atomic_write import write_atomic
from gpuopt.errors import GpuoptError, fail
from gpuopt.paths import check_output, regular_input, utf8, write_stdout
from gpuopt.paths import write_output as write_file
from gpuopt.report import format_for_path, get_renderer, print_report

if TYPE_CHECKING:
    from gpuopt.assemble.trace_job import Progress
    from gpuopt.model.profile import Profile


def report_command(
    path: Path | list[Path],
    fmt: str | None,
    output: Path | None,
    summary_only: bool = False,
    jobs: int | None = None,
) -> None:
    from gpuopt.loading import load_paths

    paths = path if isinstance(path, list) else [path]
    if summary_only:
        write_summaries(paths, output, jobs)
        return
    name = _output_format(paths, fmt, output)
    if len(paths) == 1 and _optimize_report(paths[0], name, output):
        return
    with progress_bar("analysing ranks") as progress:
        profile = load_paths(paths, jobs=jobs, progress=progress)
    _show(profile, name, output)


def _show(profile: Profile, name: str, output: Path | None) -> None:
    """The report on the terminal, or written to ``-o``."""
    if output is None:
        print_report(profile, name)
        return
    write_output(get_renderer(name).render(profile), output)


def _output_format(paths: list[Path], fmt: str | None, output: Path | None) -> str:
    """The format to render (``fmt``, else from ``-o``'s extension, else text), refused when
    unknown, and ``-o`` refused where it would overwrite what is read: before anything is read."""
    name = fmt or format_for_path(output) or "text"
    get_renderer(name)
    if output is not None:
        check_output(output, paths)
    return name


def write_output(text: str, output: Path | None, failure: str = "cannot write the report") -> None:
    """``text`` on stdout, or written to ``output`` (atomically; ``wrote FILE`` on stderr). A
    write that fails is a one-line GpuoptError: ``FILE: <failure>: <reason>``."""
    if output is None:
        write_stdout(text)
        return
    write_file(output, utf8(text), failure)
    print(f"wrote {output}", file=sys.stderr)


def write_summaries(paths: list[Path], output: Path | None, jobs: int | None) -> None:
    """``--summary-only``: each rank of the traces as ``OUT/rank-N.summary.json``."""
    from gpuopt.assemble.trace_job import summarise_traces
    from gpuopt.model.summary import SUMMARY_SUFFIX, encode_summary

    if output is None:
        raise GpuoptError(
            "--summary-only writes one file per rank: name a folder for them with -o DIR"
        )
    if len(paths) != 1:
        raise GpuoptError("--summary-only takes one trace file or one folder of per-rank traces")
    if not str(output):
        raise GpuoptError("-o '': name a folder for the summaries, e.g. -o summaries")
    if output.exists() and not output.is_dir():
        raise GpuoptError(f"{output}: not a folder; -o takes a folder with --summary-only")
    inputs.declare(paths)  # no summary is written over a trace read (gpuopt.inputs)
    if output.resolve() == paths[0].resolve():
        raise GpuoptError(
            f"{output}: is the folder of traces this reads; write the summaries to a folder "
            "of their own"
        )
    with progress_bar("summarising ranks") as progress:
        sums = summarise_traces(paths[0], jobs, progress)
    targets = [output / f"rank-{s.rank}{SUMMARY_SUFFIX}" for s in sums]
    there = [t for t in targets if t.exists()]
    if there:
        raise GpuoptError(
            f"{there[0]}: already exists ({len(there)} of the {len(targets)} summaries do); "
            "remove them or write to another -o DIR"
        )
    size = 0
    try:
        output.mkdir(parents=True, exist_ok=True)
        for s, t in zip(sums, targets, strict=True):
            data = encode_summary(s)
            write_atomic(t, data)
            size += len(data)
    except OSError as exc:
        raise GpuoptError(f"{output}: cannot write the summaries: {exc.strerror or exc}") from None
    print(
        f"wrote {len(sums)} rank summar{'y' if len(sums) == 1 else 'ies'} to {output} "
        f"({size / 1e3:.0f} kB); merge them with: gpuopt report {output} [OTHER_DIRS...]",
        file=sys.stderr,
    )


@contextmanager
def progress_bar(what: str) -> Iterator[Progress | None]:
    """A progress bar on stderr (a terminal only) for work over many ranks, else nothing: the
    callback it yields is called with (done, total) as ranks finish."""
    if not sys.stderr.isatty():
        yield None
        return
    state: dict[str, Any] = {}

    def update(done: int, total: int) -> None:
        if total < 2:
            return
        if "bar" not in state:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            bar = Progress(
                f"[bold]{what}",
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                auto_refresh=False,  # no thread: the pool's workers are forked from this process
                transient=True,
            )
            bar.start()
            state["bar"], state["task"] = bar, bar.add_task(what, total=total)
        state["bar"].update(state["task"], completed=done, refresh=True)

    try:
        yield update
    finally:
        if "bar" in state:
            state["bar"].stop()


def _optimize_report(path: Path, fmt: str, output: Path | None) -> bool:
    """A ``gpuopt optimize`` directory (or its ``optimize.json``): rendered, True; else False."""
    from gpuopt.optimize.found import optimize_file

    found = optimize_file(path)
    if found is None:
        return False
    from gpuopt.optimize.output.report import load_optimize, render

    write_output(render(load_optimize(found), fmt), output)
    return True


def _rendered(path: Path, fmt: str, jobs: int | None) -> str:
    """One input's report as text: a gpuopt optimize directory, or any profile or trace."""
    from gpuopt.loading import load
    from gpuopt.optimize.found import optimize_file

    found = optimize_file(path)
    if found is not None:
        from gpuopt.optimize.output.report import load_optimize, render

        return render(load_optimize(found), fmt)
    return get_renderer(fmt).render(load(path, jobs))


def reports_command(
    paths: list[Path],
    fmt: str | None,
    output: Path | None,
    summary_only: bool = False,
    jobs: int | None = None,
) -> None:
    """``gpuopt report A B ...``: one job's rank summaries or node directories merged into one
    report (:func:`report_command`); other inputs rendered one after another. Text and Markdown
    are the single reports joined by a rule; JSON is one array of the documents; HTML one
    page."""
    from gpuopt.loading import one_job

    for p in paths:  # a FIFO would block the first read forever, a device never end it
        regular_input(p)
    if summary_only or len(paths) == 1:
        report_command(paths, fmt, output, summary_only, jobs)
        return
    name = _output_format(paths, fmt, output)
    job = one_job(paths)
    if job is not None:
        _show(job, name, output)
        return
    if name == "html":
        text = _html_page(paths)
    elif name == "json":
        texts = [_rendered(path, name, jobs).rstrip() for path in paths]
        text = "[\n" + ",\n".join(texts) + "\n]\n"
    else:
        rule = "\n---\n\n" if name == "md" else "\n" + "─" * 80 + "\n\n"
        text = rule.join(_rendered(path, name, jobs) for path in paths)
    write_output(text, output)


def _html_page(paths: list[Path]) -> str:
    from gpuopt.loading import load
    from gpuopt.optimize.found import optimize_file
    from gpuopt.report.html import HtmlRenderer

    for path in paths:
        if optimize_file(path) is not None:
            raise GpuoptError(
                f"{path}: a gpuopt optimize directory renders alone in HTML; "
                "give it to gpuopt report by itself"
            )
    return HtmlRenderer().render_many([load(path) for path in paths])


def run_report(
    path: Path | list[Path],
    fmt: str | None,
    output: Path | None,
    summary_only: bool = False,
    jobs: int | None = None,
) -> None:
    """The ``report`` command as both entry paths run it (typer's, and gpuopt.commands.entry's
    fast one): bad input ends with a one-line reason and exit code 2."""
    try:
        paths = path if isinstance(path, list) else [path]
        reports_command(paths, fmt, output, summary_only, jobs)
    except GpuoptError as exc:
        fail(str(exc))


def report_values(values: Mapping[str, Any]) -> None:
    """:func:`run_report` of a command line's values (by the ``dest`` of
    :data:`gpuopt.commands.options.REPORT`'s declarations: typer's command's, or the entry point's
    fast path's), its paths already refused when empty; ``-o -`` is stdout."""
    output = values["output"]
    run_report(
        [Path(p) for p in values["paths"]],
        values["fmt"],
        Path(output) if output not in (None, "-") else None,
        summary_only=values["summary_only"],
        jobs=values["jobs"],
    )
