"""The command line: a thin typer layer. Each command parses options and calls one function.

Heavy imports (torch, pandas) happen inside the commands that need them, never at module level:
``gpuopt --help`` and ``gpuopt report`` must start in well under half a second. The console entry
point (:mod:`gpuopt.entry`) runs the plainest ``report`` and ``profile`` command lines itself,
without importing typer, through the same functions these commands call.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand

from gpuopt import __version__
from gpuopt.defaults import SAMPLE_INTERVAL_S, WARMUP_STEPS, WINDOW_STEPS
from gpuopt.errors import GpuoptError, fail
from gpuopt.quick_exit import exit_quickly_on

app = typer.Typer(
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
        print(f"gpuopt {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
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
    out: Path | None = typer.Option(
        None, "-o", "--out", help="Run directory (default gpuopt-runs/<stem>-<time>)."
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
        help=(
            "Steps recorded in detail (ops, copies, syncs) after warm-up; 0 turns the recorder off."
        ),
    ),
    sample_interval: float = typer.Option(
        SAMPLE_INTERVAL_S,
        "--sample-interval",
        min=0.005,
        help="Seconds between utilization samples (NVML itself averages over 1/6–1 s).",
    ),
    nproc_per_node: int | None = typer.Option(
        None, "--nproc-per-node", min=1, help="Launch N processes through torchrun."
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No live progress and no terminal report."),
    fmt: ReportFormat = typer.Option(ReportFormat.text, "--format", help="Terminal report format."),
    force: bool = typer.Option(
        False, "--force", help="Replace the profile of an earlier run in -o DIR (else refused)."
    ),
    fixes: Path | None = typer.Option(
        None,
        "--fixes",
        help="Patch in the run-time fixes gpuopt optimize --apply recorded in DIR.",
        metavar="DIR",
    ),
    seed: int | None = typer.Option(
        None, "--seed", min=0, help="Seed random, numpy and torch before the script runs."
    ),
    record_losses: bool = typer.Option(
        False,
        "--record-losses",
        help="Keep every step's loss (read once at the end) and a digest of the parameters.",
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
) -> None:
    script, args = _script_args(
        script_and_args,
        module,
        "profile needs a SCRIPT (or -m MODULE); try: gpuopt profile train.py",
        "unknown option {} for gpuopt profile; options of gpuopt go before SCRIPT, see gpuopt "
        "profile --help",
    )
    from gpuopt.runner.options import ProfileOptions, TorchrunOptions
    from gpuopt.runner.profile_command import run_profile

    opts = ProfileOptions(
        script=script,
        module=module,
        args=args,
        out=out,
        steps=steps,
        warmup=warmup,
        window=window,
        sample_interval=sample_interval,
        nproc_per_node=nproc_per_node,
        quiet=quiet,
        fmt=fmt.value,
        force=force,
        fixes=fixes,
        seed=seed,
        record_losses=record_losses,
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
    fixes: Path = typer.Option(
        ...,
        "--fixes",
        help="The directory gpuopt optimize --apply wrote (its fixes.json).",
        metavar="DIR",
    ),
) -> None:
    script, args = _script_args(
        script_and_args,
        module,
        "run needs a SCRIPT (or -m MODULE); try: gpuopt run --fixes DIR train.py",
    )
    from gpuopt.runner.fixed_run import run_with_fixes
    from gpuopt.runner.target import Target

    target = Target(script, module, args)
    try:
        code = run_with_fixes(target, fixes)
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
    paths: list[Path] = typer.Argument(
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
    output: Path | None = typer.Option(
        None,
        "-o",
        "--output",
        help="Write to FILE instead of stdout (with --summary-only: a folder for the summaries).",
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
) -> None:
    from gpuopt.report.command import run_report

    global _quick_exit
    _quick_exit = True  # runs no user code: see main()
    run_report(paths, fmt.value if fmt else None, output, summary_only=summary_only, jobs=jobs)


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
        help="Device cost model for the estimate (h100, a100, v100, ...).",
    ),
    out: Path | None = typer.Option(
        None, "-o", "--out", help="Write the plan JSON here (default: <factory>.plan.json)."
    ),
    fmt: ScheduleFormat = typer.Option(
        ScheduleFormat.text, "--format", help="text or json on stdout."
    ),
) -> None:
    from gpuopt.aot.command import schedule_command

    try:
        schedule_command(
            target, inputs=inputs, device_profile=device_profile, out=out, fmt=fmt.value
        )
    except GpuoptError as exc:
        fail(str(exc))


class CheckFormat(str, Enum):
    text = "text"
    md = "md"
    json = "json"


@app.command(
    cls=_Command,
    help=(
        "CI gate: compare CANDIDATE with --baseline BASELINE (run directories, profile.json or "
        "traces; give either several times for repeated runs). Exit 0 pass, 1 regression, "
        "2 bad input. Settings also from [tool.gpuopt.check] in pyproject.toml."
    ),
)
def check(
    candidate: list[Path] = typer.Argument(
        ..., metavar="CANDIDATE...", help="The run(s) to judge: repeats of the same code."
    ),
    baseline: list[Path] = typer.Option(
        ..., "--baseline", help="A run the candidate must not be worse than (repeatable)."
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
            "Only these gates, comma-separated: step-time, data-wait, gpu, counters, findings "
            "(default all; 'counters' alone is timing-free)."
        ),
    ),
    strict: bool | None = typer.Option(
        None, "--strict/--no-strict", help="An inconclusive gate fails (exit 1)."
    ),
    config: Path | None = typer.Option(
        None,
        "--config",
        help="Settings file (default: [tool.gpuopt.check] in the nearest pyproject.toml).",
    ),
    junit: Path | None = typer.Option(
        None, "--junit", help="Also write JUnit XML here (one test case per gated metric)."
    ),
    fmt: CheckFormat = typer.Option(CheckFormat.text, "--format", help="text, md or json."),
) -> None:
    from gpuopt.gate.command import CheckArgs, check_main

    global _quick_exit
    _quick_exit = True  # runs no user code: see main()
    flags = {
        "max-step-time-regression": max_step_time_regression,
        "max-data-wait-increase": max_data_wait_increase,
        "max-gpu-idle-increase": max_gpu_idle_increase,
        "min-gpu-util": min_gpu_util,
        "step-time-noise": step_time_noise,
        "share-noise": share_noise,
        "gates": gates,
    }
    code = check_main(
        CheckArgs(
            candidate=[str(c) for c in candidate],
            baseline=[str(b) for b in baseline],
            flags=flags,
            allow=list(allow),
            strict=strict,
            config=str(config) if config is not None else None,
            junit=str(junit) if junit is not None else None,
            fmt=fmt.value,
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
    paths: list[Path] = typer.Argument(
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
    output: Path | None = typer.Option(
        None, "-o", "--output", help="Write to FILE instead of stdout."
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
    config: Path | None = typer.Option(
        None,
        "--config",
        help="Settings file (default: [tool.gpuopt.check] in the nearest pyproject.toml).",
    ),
) -> None:
    from gpuopt.gate.command import compare_command

    global _quick_exit
    _quick_exit = True  # runs no user code: see main()
    try:
        compare_command(
            list(paths),
            fmt.value if fmt else None,
            output,
            noise={"step-time-noise": step_time_noise, "share-noise": share_noise},
            config=str(config) if config is not None else None,
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
    out: Path | None = typer.Option(
        None, "-o", "--out", help="Directory for optimize.json and the runs."
    ),
    steps: int = typer.Option(30, "--steps", min=2, help="Training steps of every run."),
    warmup: int = typer.Option(2, "--warmup", min=0, help="Steps left out of the statistics."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of every run (random, numpy, torch)."),
    fix: list[str] = typer.Option(
        [],
        "--fix",
        help=(
            "A fix to use (repeatable; default: every safe fix the findings call for): "
            "dataloader, pinned-copies, syncs, graph-breaks, zero-grad, cudnn-benchmark, "
            "vectorize, padding, aot; opt-in: amp, tf32, channels-last, compile, padding-batch."
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
    baseline: Path | None = typer.Option(
        None, "--baseline", help="An earlier gpuopt profile run to plan from."
    ),
    no_measure: bool = typer.Option(
        False, "--no-measure", help="Only plan and print the diff: no candidate runs."
    ),
    quick: bool = typer.Option(
        False, "--quick", help="No ablation and no repeated runs (cheaper, less sure)."
    ),
    quiet: bool = typer.Option(False, "--quiet", help="No progress and no report on stderr."),
    force: bool = typer.Option(False, "--force", help="Replace an earlier optimize run in -o DIR."),
    nproc_per_node: int | None = typer.Option(
        None, "--nproc-per-node", min=1, help="Not yet: optimize runs one process."
    ),
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
    from gpuopt.optimize.command import OptimizeOptions, optimize_command

    opts = OptimizeOptions(
        script=script,
        module=module,
        args=args,
        out=out,
        steps=steps,
        warmup=warmup,
        seed=seed,
        fixes=list(fix),
        amp_dtype=amp_dtype,
        apply=apply,
        write=write,
        diff=diff,
        baseline=baseline,
        measure=not no_measure,
        quick=quick,
        quiet=quiet,
        force=force,
    )
    try:
        code = optimize_command(opts)
    except GpuoptError as exc:
        fail(str(exc))
    raise typer.Exit(code)


def main() -> None:
    """Run the typer app (``gpuopt.entry.main`` calls it for every command line but the fast one).

    A command that runs no user code (``report``) ends with :func:`gpuopt.quick_exit.quick_exit`.
    Commands that run user code (``profile``, ``schedule``) always exit normally, so the user's
    atexit handlers and finalizers run.
    """
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
