"""The torch.compile tables every report format shows (docs/compile.md): what was compiled and
what it cost, each compiled function, its graph breaks and its recompiles.

Built as :class:`~gpuopt.report.sections.Section` objects like the other detail tables, so the
terminal, Markdown and HTML reports show the same rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuopt.model.records import given
from gpuopt.report.section_types import Cell, Section
from gpuopt.units import MISSING, fmt_count, fmt_duration, fmt_frac, num, one_line

if TYPE_CHECKING:
    from gpuopt.model.profile import Compile, Profile


def _text(value: Any) -> Cell:
    t = one_line(value) if value is not None else ""
    return Cell(t or MISSING, sort=t)


def _site(value: str | None) -> Cell:
    t = one_line(value)
    return Cell(t or MISSING, sort=t, site=t or None)


def _num(value: Any, fmt: Any = fmt_count) -> Cell:
    v = num(value)
    return Cell(fmt(v) if v is not None else MISSING, sort=v, numeric=v is not None)


def _steps(values: list[int] | None) -> Cell:
    if not values:
        return Cell(MISSING, sort="")
    shown = ", ".join(str(s) for s in values[:8]) + (", …" if len(values) > 8 else "")
    return Cell(shown, sort=values[0])


def _row(label: str, cell: Cell) -> list[Cell]:
    return [Cell(label, sort=label), cell]


def _summary_rows(c: Compile) -> list[list[Cell]]:
    imp = given(c.import_s)
    rows = [
        _row("backend", _text(c.backend)),
        _row("mode", _text(c.mode)),
        _row("compile time", _num(c.compile_s, fmt_duration)),
        _row("  first compiles", _num(given(c.first_compile_s), fmt_duration)),
        _row("  recompiles", _num(given(c.recompile_s), fmt_duration)),
        _row("  in measured steps", _num(given(c.compile_s_in_measured_steps), fmt_duration)),
        _row("importing torch._dynamo", _num(imp, fmt_duration)),
        _row("share of the run", _num(given(c.compile_share), fmt_frac)),
        _row("frames compiled", _num(c.frames)),
        _row("graphs compiled", _num(c.graphs)),
        _row("graph breaks (distinct)", _num(len(c.graph_breaks))),
        _row("recompiles", _num(sum(r.count for r in c.recompiles))),
        _row("compiled graphs run per step", _num(given(c.graph_calls_per_step))),
        _row("ops left eager between graphs, per step", _num(c.eager_ops_per_step)),
        _row("ops outside compiled code, per step", _num(given(c.outside_ops_per_step))),
    ]
    return [r for r in rows if r[1].text != MISSING or r[0].text == "backend"]


def compile_summary_section(profile: Profile) -> Section | None:
    c = given(profile.compile)
    if c is None:
        return None
    note = one_line(given(c.note))
    window = given(c.window_step)
    per_step = f"per step: step {window}, profiled on the CPU" if window is not None else ""
    failed = given(c.failed) or []
    extra = f"; {len(failed)} compile(s) failed, ran eagerly: {failed[0]}" if failed else ""
    return Section(
        "compile",
        "torch.compile",
        ["measure", "value"],
        _summary_rows(c),
        note="; ".join(x for x in (per_step, note) if x) + extra,
    )


def compiled_functions_section(profile: Profile) -> Section | None:
    c = given(profile.compile)
    functions = given(c.functions) if c is not None else None
    if not functions:
        return None
    rows = [
        [
            _text(f.name),
            _site(f.site),
            _site(given(f.compiled_at)),
            _num(f.frames),
            _num(f.graphs),
            _num(f.graph_breaks),
            _num(f.recompiles),
            _num(f.compile_s, fmt_duration),
        ]
        for f in functions
    ]
    return Section(
        "compile_functions",
        "Compiled functions",
        ["function", "site", "compiled at", "frames", "graphs", "breaks", "recompiles", "compile"],
        rows,
        note="frames: the function and the resume functions Dynamo made at its graph breaks; "
        "graphs: graphs compiled, recompiles included.",
    )


def graph_breaks_section(profile: Profile) -> Section | None:
    c = given(profile.compile)
    if c is None or not c.graph_breaks:
        return None
    rows = [
        [
            _site(g.site),
            _text(given(g.kind) or "unsupported"),
            _text(g.reason),
            _text(given(g.function)),
            _num(g.count),
            _text(given(g.code)),
        ]
        for g in c.graph_breaks
    ]
    return Section(
        "graph_breaks",
        "Graph breaks",
        ["site", "kind", "reason", "function", "count", "code"],
        rows,
        note="count: times Dynamo met the break while compiling (once per compile of the frame "
        "holding it). Each break splits the function: the code around it runs eagerly.",
    )


def recompiles_section(profile: Profile) -> Section | None:
    c = given(profile.compile)
    if c is None or not c.recompiles:
        return None
    rows = [
        [
            _site(r.site),
            _text(given(r.function)),
            _text(r.guard),
            _num(r.count),
            _num(r.per_step),
            _steps(given(r.steps)),
            _num(given(r.compile_s), fmt_duration),
        ]
        for r in c.recompiles
    ]
    return Section(
        "recompiles",
        "Recompiles (the guard that failed)",
        ["site", "function", "failed guard", "count", "per step", "steps", "compile"],
        rows,
        note="site: the recompiled frame's def line (a resume function's: the line after its "
        "graph break). The values that changed are in the JSON (recompiles[].reason).",
    )


def compile_sections(profile: Profile) -> list[Section]:
    """The torch.compile tables, in report order (none where nothing was compiled)."""
    found = [
        compile_summary_section(profile),
        compiled_functions_section(profile),
        graph_breaks_section(profile),
        recompiles_section(profile),
    ]
    return [s for s in found if s is not None]
