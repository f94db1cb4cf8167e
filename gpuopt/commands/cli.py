"""The command line: a thin typer layer. Each command parses options and calls one function.

Heavy imports (torch, pandas) happen inside the commands that need them, never at module level:
``gpuopt --help`` and ``gpuopt report`` must start in well under half a second. The console entry
point (:mod:`gpuopt.commands.entry`) runs the plainest ``report`` and ``profile`` command lines
itself, without importing typer, through the same functions these commands call.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from gpuopt import __version__, inputs
from gpuopt.commands.quick_exit import exit_quickly_on
from gpuopt.defaults import (
    NPROC_MAX,
    SAMPLE_INTERVAL_MAX_S,
    SAMPLE_INTERVAL_MIN_S,
    SAMPLE_INTERVAL_S,
    SEED_MAX,
    WARMUP_STEPS,
    WINDOW_MAX_STEPS,
    WINDOW_STEPS,
)
from gpuopt.errors import GpuoptError, fail, say
from gpuopt.paths import nonempty


def usage_line(exc: Any, command: str = "") -> str:
    """A usage error of typer's parser (``exc``: its UsageError) as the contract's one line:
    ``profile: invalid value for '--steps': 0 is not in the range x>=1; see gpuopt profile
    --help`` (typer's own is three lines: Usage, Try, Error). ``command``: the subcommand the
    command line named, when the error's context does not say it."""
    message = " ".join(str(exc.format_message()).split()).rstrip(".")
    if message[:1].isupper() and not message[1:2].isupper():
        message = message[0].lower() + message[1:]
    ctx = getattr(exc, "ctx", None)
    # the program as the user typed it: "gpuopt", or "python -m gpuopt" (a name with spaces)
    prog = ctx.find_root().command_path if ctx is not None else "gpuopt"
    path = ctx.command_path if ctx is not None else prog
    named = path[len(prog) :].strip() or command
    where = f"{prog} {named}" if named else prog
    return f"{named + ': ' if named else ''}{message}; see {where} --help"


def parser_errors() -> tuple[Any, Any]:
    """``(ClickException, UsageError)`` of the parser typer runs: click's up to typer 0.25, typer's
    own copy of click from 0.26 on. Found in the class tree of the public ``typer.BadParameter``
    (a UsageError in both), so no private module of typer's is imported."""
    tree = {cls.__name__: cls for cls in typer.BadParameter.__mro__}
    return tree["ClickException"], tree["UsageError"]


class _Group(TyperGroup):
    """The ``gpuopt`` command group: every usage error of every command (an unknown command or
    option, a missing or bad value) ends as ``gpuopt: error: <reason>`` on one line with exit
    code 2, as the contract says; ``--help`` and a bare ``gpuopt`` still show the help."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        click_exception, usage_error = parser_errors()
        inputs.clear()  # a command's inputs are its own: none left from an earlier one
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except usage_error as exc:
            # bare `gpuopt`: the help, as before (the class is known by name, as typer's own
            # rich_utils knows it: it is exported by neither typer nor typer.core)
            if type(exc).__name__ == "NoArgsIsHelpError":
                exc.show()
                raise SystemExit(exc.exit_code) from None
            given = list(args) if args is not None else sys.argv[1:]
            named = given[0] if given and given[0] in self.commands else ""
            fail(usage_line(exc, named))
        except click_exception as exc:
            fail(str(exc.format_message()))
        except typer.Abort:
            say("Aborted!")
            raise SystemExit(1) from None
        if not standalone_mode:
            return rv
        raise SystemExit(rv if isinstance(rv, int) else 0)


app = typer.Typer(
    cls=_Group,
    name="gpuopt",
    help="Find out why a PyTorch training run leaves its GPU idle, and fix it.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)

# Set by commands that run no user code; main() then skips the interpreter's teardown.
_quick_exit = False


class _Command(TyperCommand):
    """Usage lines as click writes them: ``gpuopt report [OPTIONS] PATH`` (typer writes a
    required argument as ``{PATH}``, which reads like a template placeholder)."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:  # ctx: typer's own click Context
        pieces = super().collect_usage_pieces(ctx)
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in pieces]


class _CheckCommand(_Command):
    """``gpuopt check``: a bare path right after ``--baseline PATH`` is refused where it could be
    a second baseline (:func:`gpuopt.commands.check_argv.ambiguous_baseline`), before click makes
    it a candidate without a word."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        from gpuopt.commands.check_argv import ambiguous_baseline

        why = ambiguous_baseline(list(args))
        if why:
            from gpuopt.errors import fail

            fail(why)
        return list(super().parse_args(ctx, args))


class ReportFormat(str, Enum):
    text = "text"
    json = "json"
    md = "md"
    html = "html"


class ScheduleFormat(str, Enum):
    text = "text"
    json = "json"


def _version(value: bool) -> None:
    if value:
        from gpuopt.debug import torch_build

        # `gpuopt 0.1.0 (torch 2.13.0+cpu, CUDA none)`; torch missing or broken: said, exit 0
        print(f"gpuopt {__version__} ({torch_build()})")
        raise typer.Exit()


def _debug(value: bool) -> None:
    if value:
        from gpuopt.debug import enable

        enable()


_DEBUG_HELP = "Debug lines on stderr (gpuopt: debug: ...), as GPUOPT_DEBUG=1 does."


def _debug_option() -> Any:
    """``--debug``, taken by the group and by every command (``gpuopt --debug profile ...`` and
    ``gpuopt profile --debug ...`` are the same)."""
    return typer.Option(False, "--debug", callback=_debug, is_eager=True, help=_DEBUG_HELP)


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_version,
        is_eager=True,
        help="Print gpuopt's version, and torch's with its CUDA build.",
    ),
    debug: bool = _debug_option(),
) -> None:
    """gpuopt: profile a training script, read its traces, and fix what leaves the GPU idle."""


_TR = "torchrun (multi-process and multi-node runs)"


def _script_args(
    script_and_args: list[str] | None, module: str | None, missing: str, unknown: str = ""
) -> tuple[str | None, list[str]]:
    """``(SCRIPT, its arguments)``, or ``(None, the module's arguments)`` with ``-m MODULE``; a
    leading ``--`` is dropped. No SCRIPT: fail with ``missing``; an option where SCRIPT should
    be: fail with ``unknown`` (``{}``: the option), or ``missing`` when there is none."""
    args = list(script_and_args or [])
    if args and args[0] == "--":
        args = args[1:]
    if module is not None:
        return None, args
    if not args:
        fail(missing)
    if args[0].startswith("-"):
        fail(unknown.format(repr(args[0])) if unknown else missing)
    return args[0], args[1:]


def _path(value: str | None, option: str) -> Path | None:
    """A path option's value (typed as text: typer turns ``''`` into ``Path('.')``, the working
    directory); empty is a usage error."""
    if value is None:
        return None
    try:
        return nonempty(value, option)
    except GpuoptError as exc:
        fail(str(exc))


def _paths(values: list[str], what: str) -> list[Path]:
    """Path arguments, each refused when empty."""
    out = []
    for v in values:
        if not v:
            fail(f"{what} '': an empty path; name a file or directory")
        out.append(Path(v))
    return out


def _sample_interval(value: float) -> float:
    """``--sample-interval``: a finite number of seconds the sampler can sleep (inf overflowed
    its sleep, nan made it spin)."""
    if not math.isfinite(value) or not SAMPLE_INTERVAL_MIN_S <= value <= SAMPLE_INTERVAL_MAX_S:
        raise typer.BadParameter(
            f"{value} is not a number of seconds from {SAMPLE_INTERVAL_MIN_S} to "
            f"{SAMPLE_INTERVAL_MAX_S:g}"
        )
    return value


@app.command(
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
    help=(
        "Run SCRIPT as `python SCRIPT ARGS` would, instrumented, and explain where each step's "
        "time goes."
    ),
)
def profile(
    script_and_args: list[str] = typer.Argument(
        None, metavar="SCRIPT [ARGS]...", help="The script and its own arguments."
    ),
    module: str | None = typer.Option(None, "-m", help="Run a module, as `python -m MODULE`."),
    out: str | None = typer.Option(
        None,
        "-o",
        "--out",
        help="Run directory (default gpuopt-runs/<stem>-<time>).",
        metavar="DIR",
    ),
    steps: int | None = typer.Option(
        None, "--steps", min=1, help="Stop cleanly after N training steps."
    ),
    warmup: int = typer.Option(
        WARMUP_STEPS, "--warmup", min=0, help="Steps left out of the statistics."
    ),
    window: int = typer.Option(
        WINDOW_STEPS,
        "--window",
        min=0,
        max=WINDOW_MAX_STEPS,
        help=(
            "Steps recorded in detail (ops, copies, syncs) after warm-up; 0 turns the recorder off."
        ),
    ),
    sample_interval: float = typer.Option(
        SAMPLE_INTERVAL_S,
        "--sample-interval",
        callback=_sample_interval,
        help="Seconds between utilization samples (NVML itself averages over 1/6–1 s).",
    ),
    nproc_per_node: int | None = typer.Option(
        None,
        "--nproc-per-node",
        min=1,
        max=NPROC_MAX,
        help="Launch N processes through torchrun.",
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No live progress and no terminal report."),
    fmt: ReportFormat = typer.Option(ReportFormat.text, "--format", help="Terminal report format."),
    force: bool = typer.Option(
        False, "--force", help="Replace the profile of an earlier run in -o DIR (else refused)."
    ),
    fixes: str | None = typer.Option(
        None,
        "--fixes",
        help="Patch in the run-time fixes gpuopt optimize --apply recorded in DIR.",
        metavar="DIR",
    ),
    seed: int | None = typer.Option(
        None,
        "--seed",
        min=0,
        max=SEED_MAX,
        help="Seed random, numpy and torch before the script runs.",
    ),
    record_losses: bool = typer.Option(
        False,
        "--record-losses",
        help="Keep every step's loss (read once at the end) and a digest of the parameters.",
    ),
    measure_only: bool = typer.Option(
        False,
        "--measure-only",
        hidden=True,
        help="Time the steps only (gpuopt optimize's runs): no recorder, profiler window, "
        "sampler or checkpoint.",
    ),
    memory_for: str | None = typer.Option(
        None,
        "--memory-for",
        metavar="DEVICE|SIZE",
        help=(
            "Predict the step's memory on that GPU with fake tensors (no GPU needed): a device "
            "(h100, a100-40gb, h200, l4 ...) or a size (80GiB); the largest batch that fits."
        ),
    ),
    nnodes: str | None = typer.Option(
        None, "--nnodes", help="torchrun: number of nodes, N or MIN:MAX.", rich_help_panel=_TR
    ),
    node_rank: int | None = typer.Option(
        None, "--node-rank", min=0, help="torchrun: this node's rank.", rich_help_panel=_TR
    ),
    rdzv_backend: str | None = typer.Option(
        None, "--rdzv-backend", help="torchrun: rendezvous backend (c10d).", rich_help_panel=_TR
    ),
    rdzv_endpoint: str | None = typer.Option(
        None, "--rdzv-endpoint", help="torchrun: rendezvous HOST[:PORT].", rich_help_panel=_TR
    ),
    rdzv_id: str | None = typer.Option(
        None, "--rdzv-id", help="torchrun: the job's id.", rich_help_panel=_TR
    ),
    master_addr: str | None = typer.Option(
        None, "--master-addr", help="torchrun: rank 0's address.", rich_help_panel=_TR
    ),
    master_port: int | None = typer.Option(
        None,
        "--master-port",
        min=1,
        max=65535,
        help="torchrun: rank 0's port.",
        rich_help_panel=_TR,
    ),
    max_restarts: int | None = typer.Option(
        None, "--max-restarts", min=0, help="torchrun: restarts on failure.", rich_help_panel=_TR
    ),
    torchrun_arg: list[str] | None = typer.Option(
        None,
        "--torchrun-arg",
        help="Any other torchrun option, as one argument (--torchrun-arg=--log-dir=logs).",
        rich_help_panel=_TR,
    ),
    debug: bool = _debug_option(),
) -> None:
    script, args = _script_args(
        script_and_args,
        module,
        "profile needs a SCRIPT (or -m MODULE); try: gpuopt profile train.py",
        "unknown option {} for gpuopt profile; options of gpuopt go before SCRIPT, see gpuopt "
        "profile --help",
    )
    from gpuopt.commands.profile import run_profile
    from gpuopt.runner.options import ProfileOptions, TorchrunOptions

    opts = ProfileOptions(
        script=script,
        module=module,
        args=args,
        out=_path(out, "-o"),
        steps=steps,
        warmup=warmup,
        window=window,
        sample_interval=sample_interval,
        nproc_per_node=nproc_per_node,
        quiet=quiet,
        fmt=fmt.value,
        force=force,
        fixes=_path(fixes, "--fixes"),
        seed=seed,
        record_losses=record_losses,
        measure_only=measure_only,
        memory_for=memory_for,
        torchrun=TorchrunOptions(
            nnodes=nnodes,
            node_rank=node_rank,
            rdzv_backend=rdzv_backend,
            rdzv_endpoint=rdzv_endpoint,
            rdzv_id=rdzv_id,
            master_addr=master_addr,
            master_port=master_port,
            max_restarts=max_restarts,
            extra=list(torchrun_arg or []),
        ),
    )
    run_profile(opts)


@app.command(
    name="run",
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
    help=(
        "Run SCRIPT as `python SCRIPT ARGS` would, with the run-time fixes gpuopt optimize "
        "--apply recorded in DIR patched in, and nothing measured (the training itself)."
    ),
)
def run_command(
    script_and_args: list[str] = typer.Argument(
        None, metavar="SCRIPT [ARGS]...", help="The script and its own arguments."
    ),
    module: str | None = typer.Option(None, "-m", help="Run a module, as `python -m MODULE`."),
    fixes: str = typer.Option(
        ...,
        "--fixes",
        help="The directory gpuopt optimize --apply wrote (its fixes.json).",
        metavar="DIR",
    ),
    debug: bool = _debug_option(),
) -> None:
    script, args = _script_args(
        script_and_args,
        module,
        "run needs a SCRIPT (or -m MODULE); try: gpuopt run --fixes DIR train.py",
    )
    from gpuopt.commands.run import run_with_fixes
    from gpuopt.script.target import Target

    target = Target(script, module, args)
    fixes_dir = _path(fixes, "--fixes")
    assert fixes_dir is not None
    try:
        code = run_with_fixes(target, fixes_dir)
    except GpuoptError as exc:
        fail(str(exc))
    raise typer.Exit(code)


@app.command(
    cls=_Command,
    help=(
        "Render a run directory, a profile.json, or PyTorch profiler traces (file or folder of "
        "ranks); several one after another, or merged when they are one job's rank summaries "
        "or node directories. Never re-runs anything."
    ),
)
def report(
    paths: list[str] = typer.Argument(
        ...,
        metavar="PATH...",
        help=(
            "Run directory, profile.json, trace .json/.json.gz, a folder of per-rank traces, "
            "or rank summaries (*.summary.json, or folders of them); several are rendered one "
            "after another, or merged when they are one job's rank summaries or the run "
            "directories of its nodes."
        ),
    ),
    fmt: ReportFormat | None = typer.Option(
        None,
        "--format",
        "-f",
        help="text, json, md or html (default: from -o's extension, else text).",
    ),
    output: str | None = typer.Option(
        None,
        "-o",
        "--output",
        help="Write to FILE instead of stdout (with --summary-only: a folder for the summaries).",
        metavar="FILE",
    ),
    summary_only: bool = typer.Option(
        False,
        "--summary-only",
        help=(
            "Traces: write one small summary per rank (DIR/rank-N.summary.json, -o DIR) instead "
            "of a report; merge them later with gpuopt report DIR1 DIR2 ..."
        ),
    ),
    jobs: int | None = typer.Option(
        None,
        "--jobs",
        "-j",
        min=1,
        help="Worker processes for a folder of traces (default: one per core, as memory allows).",
    ),
    debug: bool = _debug_option(),
) -> None:
    from gpuopt.commands.report import run_report

    global _quick_exit
    _quick_exit = True  # runs no user code: see main()
    run_report(
        _paths(paths, "PATH"),
        fmt.value if fmt else None,
        _path(output, "-o") if output != "-" else None,  # -o -: stdout, as many tools take it
        summary_only=summary_only,
        jobs=jobs,
    )


@app.command(
    cls=_Command,
    help=(
        "Plan ahead-of-time multi-stream execution (Nimble) for a static model: streams, syncs, "
        "estimated speedup."
    ),
)
def schedule(
    target: str = typer.Argument(
        ...,
        metavar="TARGET",
        help="module:factory returning an nn.Module (file.py:factory works too).",
    ),
    inputs: str | None = typer.Option(
        None, "--inputs", help="module:function returning the example inputs (a tuple)."
    ),
    device_profile: str = typer.Option(
        "h100",
        "--device-profile",
        help=(
            "Device cost model for the estimate: h100, a100-80gb, v100-16gb, v100-32gb (the "
            "names --memory-for takes; a100 and v100 too)."
        ),
    ),
    out: str | None = typer.Option(
        None,
        "-o",
        "--out",
        help="Write the plan JSON here (default: <factory>.plan.json).",
        metavar="FILE",
    ),
    fmt: ScheduleFormat = typer.Option(
        ScheduleFormat.text, "--format", help="text or json on stdout."
    ),
    streams: str = typer.Option(
        "auto",
        "--streams",
        help="auto: the multi-stream plan only where it beats one stream (measured on a GPU, "
        "else by the cost model); multi or one: that plan.",
    ),
    debug: bool = _debug_option(),
) -> None:
    from gpuopt.commands.schedule import schedule_command

    try:
        schedule_command(
            target,
            inputs=inputs,
            device_profile=device_profile,
            out=_path(out, "-o"),
            fmt=fmt.value,
            streams=streams,
        )
    except GpuoptError as exc:
        fail(str(exc))


class CheckFormat(str, Enum):
    text = "text"
    md = "md"
    json = "json"


@app.command(
    cls=_CheckCommand,
    help=(
        "CI gate: compare CANDIDATE... with --baseline BASELINE (run directories, profile.json "
        "or traces). Repeats of the same code: several candidates, and --baseline once per "
        "baseline run (--baseline B1 --baseline B2); a bare path right after a baseline is "
        "refused. Exit 0 pass, 1 regression, 2 bad input. Settings also from "
        "[tool.gpuopt.check] in pyproject.toml."
    ),
)
def check(
    candidate: list[str] = typer.Argument(
        ..., metavar="CANDIDATE...", help="The run(s) to judge: repeats of the same code."
    ),
    baseline: list[str] = typer.Option(
        ...,
        "--baseline",
        help="A run the candidate must not be worse than; one path each, repeat it for "
        "several runs (--baseline B1 --baseline B2).",
    ),
    max_step_time_regression: str | None = typer.Option(
        None,
        "--max-step-time-regression",
        help="Fail when the median step time's interval lies beyond this slowdown (default 5%).",
    ),
    max_data_wait_increase: str | None = typer.Option(
        None,
        "--max-data-wait-increase",
        help="Fail when the data-wait share rises by more (default 3pt).",
    ),
    max_outside_ops_increase: str | None = typer.Option(
        None,
        "--max-outside-ops-increase",
        help="Fail when the step's time outside tensor ops (a sleep, a blocking read, Python "
        "work issuing no op) rises by more, in points of the baseline's step (default 5pt).",
    ),
    max_gpu_idle_increase: str | None = typer.Option(
        None,
        "--max-gpu-idle-increase",
        help="Fail when a rank's GPU idle share rises by more (default 3pt).",
    ),
    min_gpu_util: str | None = typer.Option(
        None, "--min-gpu-util", help="Fail when a rank's GPU utilization is below (e.g. 60%)."
    ),
    step_time_noise: str | None = typer.Option(
        None,
        "--step-time-noise",
        help="The least run-to-run drift of step time the interval assumes (default 1%).",
    ),
    share_noise: str | None = typer.Option(
        None,
        "--share-noise",
        help="The least run-to-run drift of a share (data wait, GPU idle; default 1pt).",
    ),
    allow: list[str] = typer.Option(
        [], "--allow", help="A new HIGH finding id that does not fail (repeatable)."
    ),
    gates: str | None = typer.Option(
        None,
        "--gates",
        help=(
            "Only these gates, comma-separated: step-time, data-wait, outside-ops, gpu, "
            "counters, findings (default all; 'counters' alone is timing-free)."
        ),
    ),
    strict: bool | None = typer.Option(
        None, "--strict/--no-strict", help="An inconclusive gate fails (exit 1)."
    ),
    config: str | None = typer.Option(
        None,
        "--config",
        help="Settings file (default: [tool.gpuopt.check] in the nearest pyproject.toml).",
        metavar="FILE",
    ),
    junit: str | None = typer.Option(
        None,
        "--junit",
        help="Also write JUnit XML here (one test case per gated metric).",
        metavar="FILE",
    ),
    fmt: CheckFormat | None = typer.Option(
        None, "--format", help="text, md or json (default: from -o's extension, else text)."
    ),
    output: str | None = typer.Option(
        None,
        "-o",
        "--output",
        help="Write the report to FILE instead of stdout (the exit code is the same).",
        metavar="FILE",
    ),
    debug: bool = _debug_option(),
) -> None:
    from gpuopt.commands.check import CheckArgs, check_main

    global _quick_exit
    _quick_exit = True  # runs no user code: see main()
    flags = {
        "max-step-time-regression": max_step_time_regression,
        "max-data-wait-increase": max_data_wait_increase,
        "max-outside-ops-increase": max_outside_ops_increase,
        "max-gpu-idle-increase": max_gpu_idle_increase,
        "min-gpu-util": min_gpu_util,
        "step-time-noise": step_time_noise,
        "share-noise": share_noise,
        "gates": gates,
    }
    code = check_main(
        CheckArgs(
            candidate=[str(c) for c in _paths(candidate, "CANDIDATE")],
            baseline=[str(b) for b in _paths(baseline, "--baseline")],
            flags=flags,
            allow=list(allow),
            strict=strict,
            config=str(_path(config, "--config")) if config is not None else None,
            junit=str(_path(junit, "--junit")) if junit is not None else None,
            fmt=fmt.value if fmt else None,
            output=output,
        )
    )
    raise typer.Exit(code)


@app.command(
    cls=_Command,
    help=(
        "Runs side by side: every metric with its change and interval against the first, "
        "findings new / gone / changed, a row per rank, the kernels that changed most (traces)."
    ),
)
def compare(
    paths: list[str] = typer.Argument(
        ...,
        metavar="A B [C]...",
        help="Run directories, profile.json files or traces (all of one kind); A is the reference.",
    ),
    fmt: ReportFormat | None = typer.Option(
        None,
        "--format",
        "-f",
        help="text, md, json or html (default: from -o's extension, else text).",
    ),
    output: str | None = typer.Option(
        None, "-o", "--output", help="Write to FILE instead of stdout.", metavar="FILE"
    ),
    step_time_noise: str | None = typer.Option(
        None,
        "--step-time-noise",
        help="The least run-to-run drift of step time the intervals assume (default 1%, or "
        "the settings file's, as gpuopt check).",
    ),
    share_noise: str | None = typer.Option(
        None,
        "--share-noise",
        help="The least run-to-run drift of a share the intervals assume (default 1pt).",
    ),
    config: str | None = typer.Option(
        None,
        "--config",
        help="Settings file (default: [tool.gpuopt.check] in the nearest pyproject.toml).",
        metavar="FILE",
    ),
    debug: bool = _debug_option(),
) -> None:
    from gpuopt.commands.compare import compare_command

    global _quick_exit
    _quick_exit = True  # runs no user code: see main()
    try:
        compare_command(
            _paths(paths, "PATH"),
            fmt.value if fmt else None,
            _path(output, "-o") if output != "-" else None,  # -o -: stdout
            noise={"step-time-noise": step_time_noise, "share-noise": share_noise},
            config=str(_path(config, "--config")) if config is not None else None,
        )
    except GpuoptError as exc:
        fail(str(exc))


@app.command(
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
    help=(
        "Profile SCRIPT, plan fixes from its findings, apply them, run the same steps again, "
        "check the training is unchanged and measure each fix. The source changes go to stdout "
        "as one unified diff (the report to stderr and -o DIR)."
    ),
)
def optimize(
    script_and_args: list[str] = typer.Argument(
        None, metavar="SCRIPT [ARGS]...", help="The script and its own arguments."
    ),
    module: str | None = typer.Option(None, "-m", help="Run a module, as `python -m MODULE`."),
    out: str | None = typer.Option(
        None, "-o", "--out", help="Directory for optimize.json and the runs.", metavar="DIR"
    ),
    steps: int = typer.Option(30, "--steps", min=2, help="Training steps of every run."),
    warmup: int = typer.Option(2, "--warmup", min=0, help="Steps left out of the statistics."),
    seed: int = typer.Option(
        0, "--seed", min=0, max=SEED_MAX, help="Seed of every run (random, numpy, torch)."
    ),
    fix: list[str] = typer.Option(
        [],
        "--fix",
        help=(
            "A fix to use (repeatable; default: every safe fix the findings call for): "
            "dataloader, pinned-copies, syncs, graph-breaks, framework-knobs, zero-grad, "
            "cudnn-benchmark, vectorize, padding, cuda-graphs (on a GPU); asked by name: aot; "
            "opt-in: amp, tf32, "
            "channels-last, compile, padding-batch, batch-size, accumulation (through a "
            "training framework's setting)."
        ),
    ),
    amp_dtype: str = typer.Option(
        "auto",
        "--amp-dtype",
        help=(
            "--fix amp's dtype: bf16, fp16 (with loss scaling), or auto (bf16 unless the GPU "
            "has no bf16)."
        ),
    ),
    apply: bool = typer.Option(
        False, "--apply", help="Keep fixes with a run-time form at run time (DIR/fixes.json)."
    ),
    diff: bool = typer.Option(
        True, "--diff/--no-diff", help="Print the source changes as one unified diff (default)."
    ),
    write: bool = typer.Option(
        False, "--write", help="Edit the files in place (a backup of each is kept)."
    ),
    baseline: str | None = typer.Option(
        None, "--baseline", help="An earlier gpuopt profile run to plan from.", metavar="DIR"
    ),
    no_measure: bool = typer.Option(
        False, "--no-measure", help="Only plan and print the diff: no candidate runs."
    ),
    quick: bool = typer.Option(
        False,
        "--quick",
        help="No fix measured alone and the fewest timed runs (cheaper, less sure).",
    ),
    time_budget: float | None = typer.Option(
        None,
        "--time-budget",
        min=0,
        metavar="SECONDS",
        help="Stop adding timed runs past this many seconds from the start (default 300; the "
        "fewest runs that give a verdict always run); the gain says how sure it is.",
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No progress and no report on stderr."),
    force: bool = typer.Option(False, "--force", help="Replace an earlier optimize run in -o DIR."),
    nproc_per_node: int | None = typer.Option(
        None,
        "--nproc-per-node",
        min=1,
        max=NPROC_MAX,
        help="Not yet: optimize runs one process.",
    ),
    memory_for: str | None = typer.Option(
        None,
        "--memory-for",
        metavar="DEVICE|SIZE",
        help="Every run predicts the step's memory on that GPU (--fix batch-size needs it "
        "without a GPU).",
    ),
    debug: bool = _debug_option(),
) -> None:
    if nproc_per_node is not None and nproc_per_node > 1:
        fail("optimize runs one process so far; profile multi-rank runs with gpuopt profile")
    script, args = _script_args(
        script_and_args,
        module,
        "optimize needs a SCRIPT (or -m MODULE); try: gpuopt optimize train.py",
    )
    if amp_dtype not in ("auto", "bf16", "fp16"):
        fail(f"--amp-dtype {amp_dtype!r}: use auto, bf16 or fp16")
    from gpuopt.commands.optimize import OptimizeOptions, optimize_command

    opts = OptimizeOptions(
        script=script,
        module=module,
        args=args,
        out=_path(out, "-o"),
        steps=steps,
        warmup=warmup,
        seed=seed,
        fixes=list(fix),
        amp_dtype=amp_dtype,
        apply=apply,
        write=write,
        diff=diff,
        baseline=_path(baseline, "--baseline"),
        measure=not no_measure,
        quick=quick,
        quiet=quiet,
        force=force,
        time_budget_s=time_budget,
        memory_for=memory_for,
    )
    try:
        code = optimize_command(opts)
    except GpuoptError as exc:
        fail(str(exc))
    except OSError as exc:  # a full disk, a read-only one: one line, as for every command
        fail(f"{exc.filename or 'gpuopt optimize'}: {exc.strerror or exc}")
    raise typer.Exit(code)


def main() -> None:
    """Run the typer app (``gpuopt.commands.entry.main`` calls it for every command line but the
    fast one).

    A command that runs no user code (``report``) ends with
    :func:`gpuopt.commands.quick_exit.quick_exit`.
    Commands that run user code (``profile``, ``schedule``) always exit normally, so the user's
    atexit handlers and finalizers run.
    """
    from gpuopt import debug

    debug.isolate()
    debug.from_env()
    try:
        app()
    except SystemExit as exc:
        if _quick_exit:
            exit_quickly_on(exc)
        raise
    except GpuoptError as exc:  # pragma: no cover - commands catch their own
        fail(str(exc))


if __name__ == "__main__":
    main()
