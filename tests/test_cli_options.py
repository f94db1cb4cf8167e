"""Each command's options are declared once (gpuopt.commands.options): typer's commands are built
from the declarations, and the entry point's fast path parses with them to the same values."""

from __future__ import annotations

import subprocess
import sys
from enum import Enum
from typing import Any

import pytest
import typer
import typer.main
from conftest import ROOT
from typer.testing import CliRunner

import gpuopt.commands.cli as cli
import gpuopt.commands.entry as entry
from gpuopt.commands.options import CHECK, COMMANDS, PROFILE, REPORT, REQUIRED, Command, Opt
from gpuopt.gate.config import FRACTIONS, KEYS
from gpuopt.gate.settings import SETTINGS


def click_command(name: str) -> Any:
    return typer.main.get_command(cli.app).commands[name]  # type: ignore[attr-defined]


def plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    return list(value) if isinstance(value, (list, tuple)) else value


# typer 0.29 describes an option's type on the option (``type_descriptor``, ``min``, ``max``,
# ``bare_type()``); earlier typers, down to the declared floor 0.24, keep click's ``type``


def choices(param: Any) -> tuple[Any, ...]:
    described = getattr(param, "type_descriptor", None) or param.type
    return tuple(getattr(described, "choices", None) or ())


def bounds(param: Any) -> tuple[Any, Any]:
    if hasattr(param, "min"):
        return param.min, param.max
    return getattr(param.type, "min", None), getattr(param.type, "max", None)


CLICK_TYPES = {
    "IntParamType": "int",
    "IntRange": "int",
    "FloatParamType": "float",
    "FloatRange": "float",
}


def bare_type(param: Any) -> str:
    if hasattr(param, "bare_type"):
        return str(param.bare_type())
    name = CLICK_TYPES.get(type(param.type).__name__, "str")
    return f"list[{name}]" if param.multiple else name


def declared_default(opt: Opt) -> Any:
    if opt.default is REQUIRED:
        return None  # click: no default, the option required
    return plain(opt.default)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_typer_command_is_its_declaration(name: str) -> None:
    decl = COMMANDS[name]
    cmd = click_command(name)
    assert cmd.help == decl.help
    arguments = [p for p in cmd.params if p.param_type_name == "argument"]
    options = [p for p in cmd.params if p.param_type_name == "option"]
    assert [(p.name, p.nargs, p.required, p.metavar) for p in arguments] == [
        (a.dest, -1 if a.many else 1, a.required, a.metavar) for a in decl.args
    ]
    got = [
        (
            p.name,
            (*p.opts, *p.secondary_opts),
            p.multiple,
            p.is_flag,
            plain(p.default),
            p.required,
            p.hidden,
            p.help,
            p.metavar,
            tuple(plain(c) for c in choices(p)),
            bounds(p),
            p.rich_help_panel,
        )
        for p in options
    ]
    want = [
        (
            o.dest,
            o.flags,
            o.kind == "repeat",
            o.kind in ("flag", "switch"),
            declared_default(o),
            o.default is REQUIRED,
            o.hidden,
            o.help,
            o.metavar,
            o.choices,
            (o.min, o.max),
            o.panel,
        )
        for o in decl.options
    ]
    assert got == want
    scripts = not decl.interspersed
    assert cmd.context_settings.get("allow_interspersed_args", True) is not scripts


def test_each_options_type_is_the_declarations() -> None:
    for name, decl in COMMANDS.items():
        params = {p.name: p for p in click_command(name).params}
        for opt in decl.options:
            if opt.kind in ("value", "repeat") and not opt.choices:
                want = f"list[{opt.type}]" if opt.kind == "repeat" else opt.type
                assert bare_type(params[opt.dest]) == want, (name, opt.dest)


def test_checks_settings_are_one_table_for_the_file_and_the_command_line() -> None:
    assert {s.key: (s.field, s.unit) for s in SETTINGS} == FRACTIONS
    assert set(KEYS) == {*FRACTIONS, "allow", "strict", "gates"}
    flags = CHECK.by_flag()
    for s in SETTINGS:
        opt = flags["--" + s.key]
        assert (opt.dest, opt.help, opt.kind, opt.fast) == (s.field, s.help, "value", True)


# command lines the fast path takes: typer must give the same values
FAST = [
    ["report", "t.json"],
    ["report", "a", "-f", "md", "b", "--output=x.md"],
    ["report", "--format=json", "-o", "r.json", "t.json"],
    ["profile", "t.py"],
    ["profile", "-o", "r", "--quiet", "--force", "t.py", "--steps", "3", "--", "x"],
    ["profile", "--out=r", "t.py", "--quiet"],
    ["check", "c", "--baseline", "b"],
    ["check", "c1", "c2", "--baseline=b1", "--baseline", "b2", "--allow", "x", "--allow=y"],
    ["check", "--baseline", "b", "c", "--no-strict", "--config", "p.toml", "--junit=j.xml"],
    [
        "check",
        "c",
        "--baseline",
        "b",
        *(f"--{s.key}={n}%" for n, s in enumerate(SETTINGS, 1)),
        "--gates",
        "counters,findings",
        "--format",
        "md",
        "-o",
        "g.md",
        "--strict",
    ],
]


def typer_values(argv: list[str]) -> dict[str, Any]:
    """The values typer's command built from the same declaration gives ``run``."""
    seen: list[dict[str, Any]] = []
    app = typer.Typer(add_completion=False)

    @app.callback()
    def group() -> None:
        """A group, so that the command is named as on gpuopt's."""

    decl = COMMANDS[argv[0]]
    cli.typer_command(decl, seen.append, type(click_command(decl.name)), into=app)
    r = CliRunner().invoke(app, argv)
    assert r.exit_code == 0, r.output
    (values,) = seen
    return values


@pytest.mark.parametrize("argv", FAST, ids=" ".join)
def test_the_fast_path_gives_typers_values(argv: list[str]) -> None:
    got = entry.fast_command(argv)
    assert got is not None and got[0] == argv[0]
    assert got[1] == typer_values(argv)


def one_use(opt: Opt) -> list[str]:
    """``opt`` as a command line gives it."""
    if opt.kind in ("flag", "switch"):
        return [opt.flags[-1]]
    value = opt.choices[-1] if opt.choices else "1" if opt.type != "str" else "v"
    return [opt.flags[-1], value]


BASES: dict[str, list[str]] = {
    "report": ["report", "t.json"],
    "check": ["check", "c", "--baseline", "b"],
    "profile": ["profile"],  # options go before SCRIPT
}


@pytest.mark.parametrize("decl", [REPORT, CHECK, PROFILE], ids=lambda d: d.name)
def test_the_fast_path_takes_exactly_the_options_declared_fast(decl: Command) -> None:
    """Each option declared ``fast`` is taken (once, or repeated where repeatable) with the
    value typer gives; any other goes to typer."""
    for opt in decl.options:
        base = BASES[decl.name]
        argv = [*base, *one_use(opt), *(["t.py"] if decl is PROFILE else [])]
        values = entry.parse_fast(argv, decl)
        if not opt.fast:
            assert values is None, argv
            continue
        assert opt.type == "str" or not opt.takes_value, opt  # what the fast path can check
        assert values is not None and values == typer_values(argv), argv
        twice = [*base, *one_use(opt), *one_use(opt), *(["t.py"] if decl is PROFILE else [])]
        assert (entry.parse_fast(twice, decl) is not None) == (opt.kind == "repeat"), twice


def test_the_declarations_import_nothing_heavy() -> None:
    """The fast path imports the declarations before anything else: no typer, click, numpy, nor
    the gate's settings file reader (which imports numpy)."""
    code = (
        "import sys\n"
        "import gpuopt.commands.options, gpuopt.commands.check_argv\n"
        "heavy = {'typer', 'click', 'numpy', 'torch', 'pandas', 'rich'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy"
        " or m == 'gpuopt.gate.config'))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_the_module_form_skips_each_commands_own_valued_options() -> None:
    """``-m MODULE`` after options: each option of the command that takes a value is skipped
    with its value, whatever the value looks like."""
    for name in ("profile", "optimize", "run"):
        for flag in sorted(COMMANDS[name].valued() - {"-m"}):
            argv = [name, flag, "-m", "-m", "pkg", "--help"]
            assert entry.module_args_after_module(argv) == [*argv[:-1], "--", "--help"], argv


def test_fix_help_names_every_fix_of_the_catalogue_in_its_group() -> None:
    from gpuopt.fixes.catalogue import CATALOGUE

    (fix,) = (opt for opt in COMMANDS["optimize"].options if opt.dest == "fix")
    default, _, rest = fix.help.partition("asked by name:")
    by_name, _, opt_in = rest.partition("opt-in:")
    for kind in CATALOGUE:
        group = opt_in if kind.opt_in else by_name if kind.name == "aot" else default
        assert f" {kind.name}" in group.replace("\n", " "), kind.name
