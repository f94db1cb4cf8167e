"""The command line: a thin typer layer. Each command's arguments and options are built from its
declaration (:mod:`gpuopt.commands.options`), and the command calls one function with their values.

Heavy imports (torch, pandas) happen inside the commands that need them, never at module level:
``gpuopt --help`` and ``gpuopt report`` must start in well under half a second. The console entry
point (:mod:`gpuopt.commands.entry`) runs the plainest ``report``, ``profile`` and ``check``
command lines itself, without importing typer, parsed with the same declarations and run through
the same functions these commands call.
"""

from __future__ import annotations

import inspect
import math
import sys
from collections.abc import Callable, Sequence
from enum import Enum
from pathlib import Path
from typing import Any, cast

import typer
from typer.core import TyperCommand, TyperGroup

from gpuopt import __version__, inputs
from gpuopt.commands.options import (
    CHECK,
    COMPARE,
    DEBUG,
    OPTIMIZE,
    PROFILE,
    REPORT,
    REQUIRED,
    RUN,
    SCHEDULE,
    Arg,
    Command,
    Opt,
)
from gpuopt.commands.quick_exit import exit_quickly_on
from gpuopt.defaults import SAMPLE_INTERVAL_MAX_S, SAMPLE_INTERVAL_MIN_S
from gpuopt.errors import GpuoptError, fail, say
from gpuopt.paths import nonempty
from gpuopt.runner.options import split_script


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


def _version(value: bool) -> None:
    if value:
        from gpuopt.debug import torch_build

        # `gpuopt 0.1.0 (torch 2.13.0+cpu, CUDA none)`; torch missing or broken: said, exit 0
        print(f"gpuopt {__version__} ({torch_build()})")
        raise typer.Exit()


def _debug(value: bool) -> bool:
    if value:
        from gpuopt.debug import enable

        enable()
    return value


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_version,
        is_eager=True,
        help="Print gpuopt's version, and torch's with its CUDA build.",
    ),
    debug: bool = typer.Option(
        False, *DEBUG.flags, callback=_debug, is_eager=True, help=DEBUG.help
    ),
) -> None:
    """gpuopt: profile a training script, read its traces, and fix what leaves the GPU idle."""


def _sample_interval(value: float) -> float:
    """``--sample-interval``: a finite number of seconds the sampler can sleep (inf overflows
    its sleep, nan makes it spin)."""
    if not math.isfinite(value) or not SAMPLE_INTERVAL_MIN_S <= value <= SAMPLE_INTERVAL_MAX_S:
        raise typer.BadParameter(
            f"{value} is not a number of seconds from {SAMPLE_INTERVAL_MIN_S} to "
            f"{SAMPLE_INTERVAL_MAX_S:g}"
        )
    return value


# options whose value a function checks or acts on as it is parsed: (callback, is_eager); --debug
# (every command's, as the group's) turns debugging on before anything else runs
_CALLBACKS: dict[str, tuple[Callable[[Any], Any], bool]] = {
    "debug": (_debug, True),
    "sample_interval": (_sample_interval, False),
}
_TYPES: dict[str, type] = {"str": str, "int": int, "float": float}


def _choices(opt: Opt) -> type[Enum]:
    """The choices of ``--format`` as typer takes them: a str Enum (members in --help's order)."""
    make: Any = Enum  # the functional form, with names known only at run time
    return cast("type[Enum]", make(opt.dest.title(), {c: c for c in opt.choices}, type=str))


def _option(opt: Opt) -> tuple[Any, Any]:
    """``(annotation, typer.Option(...))`` of a declared option."""
    callback, eager = _CALLBACKS.get(opt.dest, (None, False))
    decls: tuple[str, ...] = opt.flags
    default: Any = opt.default
    annotation: Any
    if opt.kind in ("flag", "switch"):
        annotation = bool
        if opt.kind == "switch":
            decls = ("/".join(opt.flags),)
    elif opt.choices:
        annotation = _choices(opt)
        if default not in (None, REQUIRED):
            default = annotation(default)
    else:
        annotation = _TYPES[opt.type]
        if opt.kind == "repeat":
            annotation = list[annotation]
            default = list(default) if isinstance(default, tuple) else default
    if default is None:
        annotation = annotation | None
    info = typer.Option(
        default,
        *decls,
        help=opt.help,
        metavar=opt.metavar,
        min=opt.min,
        max=opt.max,
        hidden=opt.hidden,
        rich_help_panel=opt.panel,
        callback=callback,
        is_eager=eager,
    )
    return annotation, info


def _argument(arg: Arg) -> tuple[Any, Any]:
    """``(annotation, typer.Argument(...))`` of declared positional arguments."""
    annotation = list[str] if arg.many else str
    info = typer.Argument(REQUIRED if arg.required else None, metavar=arg.metavar, help=arg.help)
    return annotation, info


def plain_values(values: dict[str, Any]) -> dict[str, Any]:
    """typer's values as the declarations give them: a choice's text (not its Enum member), and
    lists, also where nothing was given."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if isinstance(value, Enum):
            value = value.value
        elif isinstance(value, (list, tuple)):
            value = list(value)
        out[name] = value
    return out


def typer_command(
    decl: Command,
    run: Callable[[dict[str, Any]], None],
    cls: type[TyperCommand] | None = None,
    into: typer.Typer = app,
) -> None:
    """Add ``decl`` to ``into`` as a typer command: its parameters built from the declaration,
    and ``run`` called with the values (:func:`plain_values`), a dict by ``dest``."""
    params = []
    for dest, (annotation, info) in [
        *((a.dest, _argument(a)) for a in decl.args),
        *((o.dest, _option(o)) for o in decl.options),
    ]:
        kind = inspect.Parameter.KEYWORD_ONLY
        params.append(inspect.Parameter(dest, kind, default=info, annotation=annotation))

    def command(**values: Any) -> None:
        run(plain_values(values))

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__name__ = decl.name
    script = {"allow_interspersed_args": False, "ignore_unknown_options": True}
    into.command(
        decl.name,
        cls=cls,
        help=decl.help,
        context_settings=None if decl.interspersed else script,
    )(command)


def _script_args(
    values: dict[str, Any], missing: str, unknown: str = ""
) -> tuple[str | None, list[str]]:
    """``(SCRIPT, its arguments)``, or ``(None, the module's arguments)`` with ``-m MODULE``; a
    leading ``--`` is dropped. No SCRIPT: fail with ``missing``; an option where SCRIPT should
    be: fail with ``unknown`` (``{}``: the option), or ``missing`` when there is none."""
    script, args = split_script(values["script_and_args"], values["module"])
    if values["module"] is not None:
        return None, args
    if script is None:
        fail(missing)
    if script.startswith("-"):
        fail(unknown.format(repr(script)) if unknown else missing)
    return script, args


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


def _profile(v: dict[str, Any]) -> None:
    _script_args(
        v,
        "profile needs a SCRIPT (or -m MODULE); try: gpuopt profile train.py",
        "unknown option {} for gpuopt profile; options of gpuopt go before SCRIPT, see gpuopt "
        "profile --help",
    )
    _path(v["out"], "-o")
    _path(v["fixes"], "--fixes")
    from gpuopt.commands.profile import run_profile
    from gpuopt.runner.options import ProfileOptions

    run_profile(ProfileOptions.from_values(v))


def _run(v: dict[str, Any]) -> None:
    script, args = _script_args(
        v, "run needs a SCRIPT (or -m MODULE); try: gpuopt run --fixes DIR train.py"
    )
    from gpuopt.commands.run import run_with_fixes
    from gpuopt.script.target import Target

    target = Target(script, v["module"], args)
    fixes_dir = _path(v["fixes"], "--fixes")
    assert fixes_dir is not None
    try:
        code = run_with_fixes(target, fixes_dir)
    except GpuoptError as exc:
        fail(str(exc))
    raise typer.Exit(code)


def _report(v: dict[str, Any]) -> None:
    from gpuopt.commands.report import report_values

    global _quick_exit
    _quick_exit = True  # runs no user code: see main()
    _paths(v["paths"], "PATH")
    if v["output"] != "-":  # -o -: stdout, as many tools take it
        _path(v["output"], "-o")
    report_values(v)


def _schedule(v: dict[str, Any]) -> None:
    from gpuopt.commands.schedule import schedule_command

    try:
        schedule_command(
            v["target"],
            inputs=v["inputs"],
            device_profile=v["device_profile"],
            out=_path(v["out"], "-o"),
            fmt=v["fmt"],
            streams=v["streams"],
        )
    except GpuoptError as exc:
        fail(str(exc))


def _check(v: dict[str, Any]) -> None:
    from gpuopt.commands.check import CheckArgs, check_main

    global _quick_exit
    _quick_exit = True  # runs no user code: see main()
    _paths(v["candidate"], "CANDIDATE")
    _paths(v["baseline"], "--baseline")
    _path(v["config"], "--config")
    _path(v["junit"], "--junit")
    raise typer.Exit(check_main(CheckArgs.from_values(v)))


def _compare(v: dict[str, Any]) -> None:
    from gpuopt.commands.compare import compare_command

    global _quick_exit
    _quick_exit = True  # runs no user code: see main()
    output = v["output"]
    try:
        compare_command(
            _paths(v["paths"], "PATH"),
            v["fmt"],
            _path(output, "-o") if output != "-" else None,  # -o -: stdout
            noise={"step-time-noise": v["step_time_noise"], "share-noise": v["share_noise"]},
            config=str(_path(v["config"], "--config")) if v["config"] is not None else None,
        )
    except GpuoptError as exc:
        fail(str(exc))


def _optimize(v: dict[str, Any]) -> None:
    if v["nproc_per_node"] is not None and v["nproc_per_node"] > 1:
        fail("optimize runs one process so far; profile multi-rank runs with gpuopt profile")
    script, args = _script_args(
        v, "optimize needs a SCRIPT (or -m MODULE); try: gpuopt optimize train.py"
    )
    if v["amp_dtype"] not in ("auto", "bf16", "fp16"):
        fail(f"--amp-dtype {v['amp_dtype']!r}: use auto, bf16 or fp16")
    from gpuopt.commands.optimize import OptimizeOptions, optimize_command

    opts = OptimizeOptions(
        script=script,
        module=v["module"],
        args=args,
        out=_path(v["out"], "-o"),
        steps=v["steps"],
        warmup=v["warmup"],
        seed=v["seed"],
        fixes=list(v["fix"]),
        amp_dtype=v["amp_dtype"],
        apply=v["apply"],
        write=v["write"],
        diff=v["diff"],
        baseline=_path(v["baseline"], "--baseline"),
        measure=not v["no_measure"],
        quick=v["quick"],
        quiet=v["quiet"],
        force=v["force"],
        time_budget_s=v["time_budget"],
        memory_for=v["memory_for"],
    )
    try:
        code = optimize_command(opts)
    except GpuoptError as exc:
        fail(str(exc))
    except OSError as exc:  # a full disk, a read-only one: one line, as for every command
        fail(f"{exc.filename or 'gpuopt optimize'}: {exc.strerror or exc}")
    raise typer.Exit(code)


# in the order of gpuopt --help; each command's arguments and options are its declaration's
typer_command(PROFILE, _profile)
typer_command(RUN, _run)
typer_command(REPORT, _report, _Command)
typer_command(SCHEDULE, _schedule, _Command)
typer_command(CHECK, _check, _CheckCommand)
typer_command(COMPARE, _compare, _Command)
typer_command(OPTIMIZE, _optimize)


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
