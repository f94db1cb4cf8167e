"""The README as a new user follows it, from a fresh clone in a new shell: its first block is the
two set-up commands; `gpuopt` is put on the PATH before any command uses it; every `gpuopt`
command it shows names a real subcommand, that subcommand's real options and files that exist."""

from __future__ import annotations

import re
from typing import Any

import pytest
from conftest import ROOT

from gpuopt.commands.cli import app

README = (ROOT / "README.md").read_text(encoding="utf-8")
ACTIVATE = "source .venv/bin/activate"


def _blocks(text: str) -> list[list[str]]:
    """The lines of every fenced code block, in order."""
    return [block.splitlines() for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)]


def _commands(text: str) -> list[tuple[int, str]]:
    """Every gpuopt command line the text shows, with its offset: a code block's line that
    starts with `$ gpuopt ` (in a block of prompts and output) or `gpuopt ` (in a block of
    commands), or an inline code span that starts with `gpuopt `."""
    found = []
    for block in re.finditer(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S):
        prompt = "$ " if re.search(r"^\$ ", block.group(1), re.M) else ""
        pattern = rf"^{re.escape(prompt)}(gpuopt [^\n]*)$"
        found += [
            (block.start(1) + m.start(1), m.group(1))
            for m in re.finditer(pattern, block.group(1), re.M)
        ]
    found += [(m.start(1), m.group(1)) for m in re.finditer(r"`(gpuopt [^`]*)`", text)]
    return sorted(found)


def _in_block(text: str, offset: int) -> bool:
    return text[:offset].count("```") % 2 == 1


def _subcommand(name: str) -> Any:
    import typer.main

    return typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]


def test_the_readme_starts_with_the_two_set_up_commands() -> None:
    first = [line.split("#")[0].strip() for line in _blocks(README)[0] if line.strip()]
    assert first == ["make demo", "make test"]
    assert README.startswith("# gpuopt\n\n```\nmake demo ")


def test_gpuopt_is_put_on_the_path_before_any_command_uses_it() -> None:
    activation = README.index(ACTIVATE)
    assert _in_block(README, activation)
    commands = _commands(README)
    assert commands and activation < commands[0][0], commands[0]
    # the set-up block, then the activation, before anything else is shown
    assert README.index("```", README.index("make test")) < activation < README.index("\n## ")


def test_make_demo_ends_by_saying_how_to_run_gpuopt() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0].replace("$(VENV)", ".venv")
    assert ACTIVATE in recipe.strip().splitlines()[-1]


def test_make_test_fast_is_the_suite_without_slow_tests_and_in_the_readme() -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ntest-fast:", 1)[1].split("\n\n", 1)[0]
    assert '-m "not slow"' in recipe
    assert "`make test-fast`" in README


# the README's placeholders and syntax, not arguments: SCRIPT, [OPTIONS], a|b, PATH...
_SYNTAX = re.compile(r"^[\[\]A-Z_.|\\]+$|\.\.\.")


@pytest.mark.parametrize("command", [c for _, c in _commands(README)], ids=lambda c: c[:60])
def test_every_command_the_readme_shows_is_one_gpuopt_takes(command: str) -> None:
    words = command.replace("\\|", "|").split()
    assert words[0] == "gpuopt"
    if len(words) == 1 or words[1].startswith("-"):
        return
    sub = _subcommand(words[1])
    declared = {name for param in sub.params for name in getattr(param, "opts", [])}
    declared |= {name for param in sub.params for name in getattr(param, "secondary_opts", [])}
    declared.add("--help")
    takes_script = words[1] in ("profile", "optimize", "run")
    for word in words[2:]:
        word = word.strip("[]")
        if not word.startswith("-"):
            if takes_script and not _SYNTAX.search(word):
                break  # the script: what follows is its own
            continue
        assert word.split("=")[0] in declared, f"{word} is not an option of gpuopt {words[1]}"
    for path in re.findall(r"\b(examples/\S+\.py)\b", command):
        assert (ROOT / path).is_file(), path
