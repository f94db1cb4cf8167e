"""``gpuopt check CANDIDATE... --baseline BASELINE...``: load both sides, gate, report, exit
0/1/2.

Besides the report in the chosen format (on stdout, or with ``-o FILE`` written to that file,
whole, as ``gpuopt compare -o`` writes): ``--junit FILE`` writes JUnit XML; when
``$GITHUB_STEP_SUMMARY`` is set the Markdown report is appended to that file; when
``$GITHUB_ACTIONS`` is ``true`` every regression is also a workflow annotation (``::error
file=…,line=…::…``, on stderr, so stdout stays the report).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuopt.errors import GpuoptError, say
from gpuopt.gate.check import Thresholds, evaluate, exit_code
from gpuopt.gate.output import (
    CheckResult,
    github_annotations,
    render_json,
    render_junit,
    render_markdown,
    render_text,
)
from gpuopt.gate.runs import environment_notes, load_side, same_kind, timed_runs
from gpuopt.gate.settings import SETTINGS
from gpuopt.paths import check_output, nonempty, utf8, write_output, write_stdout

FORMATS = ("text", "md", "json")


@dataclass(frozen=True)
class CheckOptions:
    candidate: list[Path]
    baseline: list[Path]
    thresholds: Thresholds
    strict: bool = False
    fmt: str = "text"
    junit: Path | None = None
    output: Path | None = None  # -o FILE: the report written there instead of stdout
    config: str | None = None  # where the settings came from, for the report
    config_path: Path | None = None  # the settings file read, an input like the runs


def _status_notes(paths: list[Path], statuses: list[str], side: str) -> list[str]:
    return [
        f"the {side} run {path} ended with status {status!r}: its steps so far are compared"
        for path, status in zip(paths, statuses, strict=True)
        if status != "ok"
    ]


def run_check(opts: CheckOptions) -> CheckResult:
    """Load and gate; bad input raises GpuoptError (exit 2)."""
    if opts.fmt not in FORMATS:
        raise GpuoptError(f"gpuopt check prints {', '.join(FORMATS)}, not {opts.fmt!r}")
    reads = [*opts.baseline, *opts.candidate, *filter(None, [opts.config_path])]
    if opts.junit is not None:
        check_output(opts.junit, reads, "--junit")
    if opts.output is not None:
        check_output(opts.output, reads, "-o")
        if opts.junit is not None and opts.junit.resolve() == opts.output.resolve():
            raise GpuoptError(f"-o {opts.output}: --junit writes that file; give each its own")
    base, cand = load_side(opts.baseline), load_side(opts.candidate)
    same_kind(base, cand)
    timed = timed_runs(base, cand)
    gates = evaluate(
        [r.profile for r in base],
        [r.profile for r in cand],
        opts.thresholds,
        timed=([r.profile for r in timed.baseline], [r.profile for r in timed.candidate]),
        busy=timed.inconclusive,
        explained=timed.explained,
    )
    notes = [
        *timed.notes,
        *environment_notes(base, cand),
        *_status_notes([r.path for r in base], [r.profile.status for r in base], "baseline"),
        *_status_notes([r.path for r in cand], [r.profile.status for r in cand], "candidate"),
    ]
    return CheckResult(
        gates=gates,
        exit_code=exit_code(gates, opts.strict),
        baseline=[str(r.path) for r in base],
        candidate=[str(r.path) for r in cand],
        notes=notes,
        config=opts.config,
        strict=opts.strict,
    )


def _append(path: str, text: str, reads: list[Path]) -> None:
    """``$GITHUB_STEP_SUMMARY``: appended to (a warning, not a failure, when it cannot be), never
    when it is one of the runs read."""
    try:
        check_output(Path(path), reads, "GITHUB_STEP_SUMMARY")
    except GpuoptError as exc:
        say(f"gpuopt: warning: not appended to GITHUB_STEP_SUMMARY: {exc}")
        return
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        say(f"gpuopt: warning: GITHUB_STEP_SUMMARY {path}: {exc.strerror or exc}")


def check_command(opts: CheckOptions) -> int:
    """The exit code: 0 pass, 1 regression; bad input raises GpuoptError (exit 2)."""
    result = run_check(opts)
    render = {"text": render_text, "md": render_markdown, "json": render_json}[opts.fmt]
    if opts.junit is not None:
        write_output(opts.junit, utf8(render_junit(result)))
    if opts.output is None:
        write_stdout(render(result))
    else:
        write_output(opts.output, utf8(render(result)), "cannot write the report")
        say(f"wrote {opts.output}")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        reads = [*opts.baseline, *opts.candidate, *filter(None, [opts.config_path])]
        _append(summary, render_markdown(result), reads)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in github_annotations(result, Path.cwd()):
            print(line, file=sys.stderr)
    return result.exit_code


@dataclass(frozen=True)
class CheckArgs:
    """``gpuopt check``'s command line as typed (typer's and gpuopt.commands.entry's fast path
    build the same): ``flags`` maps the settings keys (``max-step-time-regression``, ...,
    ``gates``) to the text given, None where not given."""

    candidate: list[str]
    baseline: list[str]
    flags: dict[str, str | None]
    allow: list[str]
    strict: bool | None = None
    config: str | None = None
    junit: str | None = None
    fmt: str | None = None  # None: from -o's extension, else text
    output: str | None = None  # -o FILE; None or "-": stdout

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> CheckArgs:
        """The arguments of a command line's values (by the ``dest`` of
        :data:`gpuopt.commands.options.CHECK`'s declarations: typer's command's, or the entry
        point's fast path's), its paths already refused when empty."""

        def path(value: str | None) -> str | None:
            return None if value is None else str(Path(value))

        flags = {s.key: values[s.field] for s in SETTINGS}
        return cls(
            candidate=[str(Path(c)) for c in values["candidate"]],
            baseline=[str(Path(b)) for b in values["baseline"]],
            flags={**flags, "gates": values["gates"]},
            allow=list(values["allow"]),
            strict=values["strict"],
            config=path(values["config"]),
            junit=path(values["junit"]),
            fmt=values["fmt"],
            output=values["output"],
        )


def check_main(args: CheckArgs) -> int:
    """Settings (flags over the config file over the defaults), then the check; the exit code.
    Bad input or a bad setting ends with a one-line reason and exit code 2."""
    from gpuopt.errors import fail
    from gpuopt.gate.config import find_config, load_settings, resolve
    from gpuopt.report import format_for_path

    try:
        config = Path(args.config) if args.config is not None else None
        settings = load_settings(config, Path.cwd())
        th, strict = resolve(args.flags, list(args.allow), args.strict, settings)
        output = None if args.output in (None, "-") else nonempty(args.output, "-o")
        wants_config = args.junit is not None or output is not None
        opts = CheckOptions(
            candidate=[Path(c) for c in args.candidate],
            baseline=[Path(b) for b in args.baseline],
            thresholds=th,
            strict=strict,
            fmt=args.fmt or format_for_path(output) or "text",
            junit=nonempty(args.junit, "--junit") if args.junit is not None else None,
            output=output,
            config=settings.source,
            config_path=config or (find_config(Path.cwd()) if wants_config else None),
        )
        return check_command(opts)
    except GpuoptError as exc:
        fail(str(exc))
