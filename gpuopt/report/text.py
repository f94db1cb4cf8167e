"""The terminal report: what ``gpuopt profile`` prints when the run ends, and ``gpuopt report``'s
default format.

Laid out for one screen at 100 columns: who/what ran, step-time statistics, where step time goes
(one bar), utilization over time (sparklines), then the findings ranked by estimated gain, each
with its evidence and fix; the detail tables follow for those who scroll. Built with rich, but
every string from the document goes in as a ``Text`` (never as markup) after its control
characters are neutralised, so a script name cannot restyle or rewrite the terminal.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gpuopt.report import headline as h
from gpuopt.report import utilization as u
from gpuopt.report.findings import (
    Footnotes,
    evidence_numbers,
    evidence_summary,
    no_findings_message,
    ordered_findings,
)
from gpuopt.report.renderer import Renderer
from gpuopt.report.sections import Section, detail_sections
from gpuopt.report.textcharts import bar_lengths, resample, spark
from gpuopt.units import (
    MISSING,
    fmt_bytes,
    fmt_duration,
    fmt_frac,
    fmt_speedup,
    fmt_util,
    num,
    one_line,
    text,
)

if TYPE_CHECKING:
    from gpuopt.model.profile import Finding, Profile
    from gpuopt.report.headline import StepSplit

_SEGMENT_STYLE = {
    "data_wait": "red",
    "h2d": "magenta",
    "sync": "yellow",
    "compute": "green",
    "other": "bright_black",
    "collective": "blue",
}
_SEGMENT_CHAR = {
    "data_wait": "D",
    "h2d": "H",
    "sync": "S",
    "compute": "C",
    "other": "o",
    "collective": "N",
}  # plain text
_SEVERITY_STYLE = {"high": "bold red", "medium": "bold yellow", "low": "cyan"}
_STATUS_STYLE = {
    "ok": "bold green",
    "error": "bold white on red",
    "interrupted": "bold black on yellow",
}
_FULL_FINDINGS = 8  # findings shown with evidence and fix; the rest get one line each
_INDENT = " " * 11  # under the values of "per step   "
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(value: Any) -> str:
    """Text safe to print on a terminal: control characters (ANSI escapes, carriage returns,
    bidi overrides) from the document are shown as ``\\xNN`` instead of acting on the terminal."""

    def repl(m: re.Match[str]) -> str:
        c = ord(m.group(0))
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"

    return _CONTROL.sub(repl, text(value).replace("\t", " "))


def _spaced(lines: list[RenderableType]) -> RenderableType:
    """A block of the report, one blank line above it."""
    return Padding(Group(*lines), (1, 0, 0, 0))


class TextRenderer(Renderer):
    """Rich text for a terminal; ``color=False`` gives plain text with no escape codes."""

    name = "text"

    def render(self, profile: Profile) -> str:
        buf = io.StringIO()
        console = Console(
            file=buf,
            force_terminal=self.color,
            color_system="auto" if self.color else None,
            width=self.width,
            highlight=False,
            markup=False,
            emoji=False,
            legacy_windows=False,
            soft_wrap=False,
        )
        console.print(Group(*self.parts(profile)))
        # rich pads every line to the full width; trailing blanks only get in the way (diffs,
        # CI logs)
        return "\n".join(line.rstrip(" ") for line in buf.getvalue().split("\n"))

    # --- sections -------------------------------------------------------------------------

    def parts(self, profile: Profile) -> list[RenderableType]:
        out: list[RenderableType] = [
            self.header(profile),
            self.step_time(profile),
            self.breakdown(profile),
            self.utilization(profile),
            self.findings(profile),
        ]
        out += [self.table(section) for section in detail_sections(profile)]
        warnings = h.warnings_list(profile)
        if warnings:
            t = Text()
            t.append("warnings\n", style="bold")
            for w in warnings:
                t.append("  ! ", style="yellow")
                t.append(printable(w) + "\n")
            t.rstrip()
            out.append(Padding(t, (1, 0, 0, 0)))
        cost = h.overhead_line(profile)
        if cost:
            out.append(Padding(Text(printable(cost), style="dim"), (1, 0, 0, 0)))
        return out

    def header(self, profile: Profile) -> RenderableType:
        facts = dict(h.header_facts(profile))
        status = profile.status
        title = Text()
        title.append("gpuopt ", style="bold")
        title.append(printable(facts["script"]), style="bold cyan")
        title.append("  ")
        title.append(f" {status.upper()} ", style=_STATUS_STYLE.get(status, "bold"))
        title.append(f"  exit code {printable(facts['exit code'])}")
        if profile.source == "trace":
            title.append("  (from a profiler trace)", style="dim")
        lines = [title]
        for keys in (("device", "wall time"), ("steps",)):
            info = Text()
            for i, key in enumerate(keys):
                if i:
                    info.append("   ")
                info.append(f"{key} ", style="dim")
                info.append(printable(facts[key]))
            lines.append(info)
        err = h.error_line(profile)
        if err:
            failed = status == "error"
            label = "error: " if failed else "note: "
            lines.append(Text(label + printable(err), style="red" if failed else "yellow"))
        return Group(*lines)

    def step_time(self, profile: Profile) -> RenderableType:
        t = Text()
        t.append("step time  ", style="bold")
        stats = h.step_stats(profile)
        if all(v is None for _, v in stats):
            t.append("no measured steps", style="yellow")
            if profile.steps.count == 0:
                t.append(f" ({h.NO_STEPS_HINT})", style="dim")
            return Padding(t, (1, 0, 0, 0))
        for i, (label, value) in enumerate(stats):
            if i:
                t.append("   ")
            t.append(f"{label} ", style="dim")
            t.append(fmt_duration(value), style="bold" if label == "median" else "")
        series = h.step_series(profile)
        lines: list[RenderableType] = [t]
        if len(series) >= 2:
            lines += self.per_step(series)
        return _spaced(lines)

    def per_step(self, series: list[StepSplit]) -> list[RenderableType]:
        """The step times as a sparkline scaled to the measured steps (warm-up dimmed, a step
        above the scale as ↑), or averaged down to the width on a long run."""
        width = max(10, self.width - 30)
        times = [r.time_s for r in series]
        n_warm = sum(1 for r in series if r.warmup)
        hi = max([r.time_s for r in series if not r.warmup] or times)
        line = Text()
        line.append("per step   ", style="dim")
        if len(series) <= width:
            for r in series:
                mark = spark([r.time_s], 0.0, hi) if r.time_s <= hi else "↑"
                line.append(mark, style="dim" if r.warmup else "cyan")
        else:
            line.append(spark(resample(times, width), 0.0, hi), style="cyan")
        line.append(f"  max {fmt_duration(max(times))}", style="dim")
        out: list[RenderableType] = [line]
        if len(series) > width:
            out.append(
                Text(
                    f"{_INDENT}{len(series):,} steps, each mark the mean of "
                    f"~{len(series) / width:.1f}",
                    style="dim",
                )
            )
        if n_warm and len(series) <= width:
            out.append(
                Text(
                    f"{_INDENT}{n_warm} warm-up step(s) dimmed, ↑ = above the scale "
                    "(slower than any measured step)",
                    style="dim",
                )
            )
        return out

    def breakdown(self, profile: Profile) -> RenderableType:
        items = h.breakdown_items(profile.breakdown)
        head = Text("where step time goes", style="bold")
        if not items:
            return _spaced([head, Text("no breakdown: no measured steps", style="yellow")])
        lengths = bar_lengths([f for _, _, f in items], self.width - 2)
        bar = Text(" ")
        for (key, _, _), n in zip(items, lengths, strict=True):
            if n:
                bar.append(
                    ("█" if self.color else _SEGMENT_CHAR[key]) * n, style=_SEGMENT_STYLE[key]
                )
        # the legend wraps between items, each line indented as the bar (never inside an item)
        legend = [Text(" ")]
        for key, label, frac in items:
            item = Text(("■" if self.color else _SEGMENT_CHAR[key]) + " ", _SEGMENT_STYLE[key])
            item.append(f"{label} ")
            item.append(fmt_frac(frac), style="bold")
            line = legend[-1]
            if len(line) > 1 and len(line) + 3 + len(item) > self.width:
                legend.append(line := Text(" "))
            elif len(line) > 1:
                line.append("   ")
            line.append_text(item)
        return _spaced([head, bar, *legend])

    def utilization(self, profile: Profile) -> RenderableType:
        head = Text("utilization", style="bold")
        tl = u.timeline(profile)
        sampling = u.sampling_note(profile, tl)
        if sampling:
            head.append(f"  ({sampling})", style="dim")
        note = u.utilization_note(profile)
        lines: list[RenderableType] = [head]
        lines += [self.utilization_line(profile, key, tl, note) for key in ("cpu", "gpu")]
        if note and u.gpu_utilization_measured(profile):
            lines.append(Text(f" note: {printable(note)}", style="dim"))
        memory = _memory_line(tl)
        if memory is not None:
            lines.append(memory)
        return _spaced(lines)

    def utilization_line(
        self, profile: Profile, key: str, tl: u.TimelineView | None, note: str
    ) -> Text:
        """`` CPU  ▁▂▅█  mean 22%  max 37%``, or why it was not measured."""
        label = key.upper()
        mean, mx = u.utilization_summary(profile, key)
        values = tl.series.get(key) if tl is not None else None
        if values is None and mean is None and mx is None:
            # the note says why; it is shown once: on the GPU line, or below when GPU was measured
            why = f": {printable(note)}" if note and key == "gpu" else ""
            return Text(f" {label}  not measured{why}", style="dim")
        line = Text(f" {label}  ")
        if values is not None:
            spark_width = max(10, self.width - 52)
            line.append(
                spark(resample(values, spark_width), 0.0, 100.0).ljust(spark_width),
                style="green" if key == "gpu" else "blue",
            )
            line.append("  ")
        line.append("mean ", style="dim")
        line.append(fmt_util(mean))
        line.append("  max ", style="dim")
        line.append(fmt_util(mx))
        cores = u.cpu_cores_note(profile) if key == "cpu" else ""
        if cores:
            line.append(f"  {cores}", style="dim")
        return line

    def findings(self, profile: Profile) -> RenderableType:
        findings = ordered_findings(profile)
        head = Text("findings", style="bold")
        if not findings:
            return _spaced([head, Text(no_findings_message(profile), style="dim")])
        head.append("  ranked by estimated gain", style="dim")
        notes = Footnotes()
        grid = Table.grid(padding=(0, 1), expand=True)
        grid.add_column(width=2, justify="right")
        grid.add_column(width=6)
        grid.add_column(ratio=1)
        grid.add_column(justify="right", no_wrap=True)
        for i, f in enumerate(findings, 1):
            title = Text(printable(one_line(f.title) or one_line(f.id)), style="bold")
            est = _estimate(f, notes)
            sev = one_line(f.severity) or MISSING
            sev_text = Text(sev.upper(), style=_SEVERITY_STYLE.get(sev, ""))
            if i > _FULL_FINDINGS:
                grid.add_row(f"{i}", sev_text, title, est)
                continue
            grid.add_row(f"{i}", sev_text, _finding_body(f, title), est)
            if i < min(len(findings), _FULL_FINDINGS):
                grid.add_row("", "", "", "")
        lines: list[RenderableType] = [head, grid]
        if notes.models:
            lines.append(Text("est. = estimated, not measured; how:", style="dim"))
            foot = Table.grid(padding=(0, 1), expand=True)  # a model's text wraps under itself
            foot.add_column(no_wrap=True, style="dim")
            foot.add_column(ratio=1, style="dim")
            for n, model in enumerate(notes.models, 1):
                foot.add_row(f" [{n}]", printable(model))
            lines.append(foot)
        return _spaced(lines)

    def table(self, section: Section) -> RenderableType:
        # title and note sit outside the table so they use the full width, not the table's
        columns, numeric = [printable(col) for col in section.columns], section.numeric_columns
        shown = (
            section.rows if section.compact_rows is None else section.rows[: section.compact_rows]
        )
        rows = [[printable(cell.text) for cell in r] for r in shown]  # widths of what is printed
        site_cols = {j for r in shown for j, cell in enumerate(r) if cell.site}
        if section.per_rank and len(rows) <= 8 and _needed_width(columns, rows) > self.width:
            # too wide for the terminal (per-rank GPU tables on a narrow one): one column per row
            # reads better than cells broken mid-number
            columns, rows, numeric = _transpose(columns, rows, numeric)
            site_cols = set()
        widths = _column_widths(columns, rows, site_cols, self.width)
        if widths is not None:
            rows = _shortened_sites(rows, site_cols, widths)
            rows = _clipped_text(rows, site_cols, widths)
        # even with headers and sites folded the columns may not fit: then one block per row
        # ("name: value" lines), so no number is ever cut
        table = _records(columns, rows) if widths is None else _grid(columns, rows, numeric, widths)
        parts: list[RenderableType] = [Text(printable(section.title), style="bold"), table]
        hidden = len(section.rows) - len(shown)
        if hidden:
            parts.append(
                Text(
                    f"… {hidden} more rows: gpuopt report DIR --format html (or json)", style="dim"
                )
            )
        if section.note:
            parts.append(Text(printable(section.note), style="dim"))
        return _spaced(parts)


def _estimate(f: Finding, notes: Footnotes) -> Text:
    """``est. 1.25× [1]`` (the footnote names the model), or nothing without an estimate."""
    est = Text()
    if num(f.est_speedup) is not None:
        est.append(fmt_speedup(f.est_speedup), style="bold")
        ref = notes.ref(f.estimate_model)
        est.append(f" [{ref}]" if ref else " [no model]", style="dim")
    return est


def _finding_body(f: Finding, title: Text) -> Text:
    """Title, id and site, the evidence (summary and numbers) and the fix."""
    body = Text()
    body.append_text(title)
    meta = [printable(one_line(f.id))]
    if f.site:
        meta.append("at " + printable(one_line(f.site)))
    body.append("\n" + " · ".join(m for m in meta if m), style="dim")
    summary = evidence_summary(f)
    if summary:
        body.append("\n" + printable(summary))
    numbers = evidence_numbers(f, limit=6)
    if numbers:
        body.append(
            "\n" + "  ".join(f"{printable(k)}={printable(v)}" for k, v in numbers), style="dim"
        )
    fix = one_line(f.fix)
    if fix:
        body.append("\nfix: ", style="bold green")
        body.append(printable(fix))
    return body


def _memory_line(tl: u.TimelineView | None) -> Text | None:
    """`` memory host RSS peak 1.2 GiB · GPU memory peak 41.2 GiB``, where sampled."""
    if tl is None:
        return None
    parts = []
    rss = [v for v in tl.memory.get("rss_bytes", []) if v is not None]
    gmem = [v for v in tl.memory.get("gpu_memory_bytes", []) if v is not None]
    if rss:
        parts.append(f"host RSS peak {fmt_bytes(max(rss))}")
    if gmem:
        parts.append(f"GPU memory peak {fmt_bytes(max(gmem))}")
    if not parts:
        return None
    mem = Text(" memory ", style="dim")
    mem.append(" · ".join(parts))
    return mem


def _grid(columns: list[str], rows: list[list[str]], numeric: set[int], widths: list[int]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1))
    for j, col in enumerate(columns):
        table.add_column(
            Text(col),
            justify="right" if j in numeric else "left",
            overflow="fold",
            width=widths[j],
        )
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    return table


_SITE_MIN = 16  # a folded site column keeps at least this many characters per line
_RECORDS_MAX_ROWS = 8  # a short table of sites may become blocks of lines, not fold headers
_SITE_MAX = 40  # ... and at most this many when it makes room for whole file names
_LONG_TEXT = 24  # text cells longer than this may fold


def _column_widths(
    columns: list[str], rows: list[list[str]], site_cols: set[int], width: int
) -> list[int] | None:
    """Exact column widths within ``width`` that keep every number and short value whole.

    Each column first gets its widest cell (sites and long text: at most ``_SITE_MIN``); what is
    left goes, one character at a time, first to header words that would fold, then to the
    folded text columns. None when the cells alone do not fit (the caller then shows one block
    per row)."""
    n = len(columns)
    gaps = 3 * max(0, n - 1)
    cells = [max((len(r[j]) for r in rows if j < len(r)), default=0) for j in range(n)]
    words = [max((len(w) for w in col.split()), default=0) for col in columns]
    natural = [max(1, cells[j], words[j]) for j in range(n)]
    if sum(natural) + gaps <= width:
        return natural
    flexible = {j for j in range(n) if j in site_cols or cells[j] > _LONG_TEXT}
    least = [
        _site_least(r[j] for r in rows if j < len(r)) if j in site_cols else _SITE_MIN
        for j in range(n)
    ]
    widths = [min(least[j], natural[j]) if j in flexible else max(1, cells[j]) for j in range(n)]
    left = width - gaps - sum(widths)
    if left < 0:
        return None
    for group in ([j for j in range(n) if j not in flexible], sorted(flexible)):
        while left > 0:
            short = [j for j in group if widths[j] < natural[j]]
            if not short:
                break
            for j in short:
                if left == 0:
                    break
                widths[j] += 1
                left -= 1
    if (
        site_cols
        and len(rows) <= _RECORDS_MAX_ROWS
        and any(widths[j] < words[j] for j in range(n) if j not in flexible)
    ):
        return None  # a header word would break mid-word: a few blocks of lines read better
    return widths


_FOLD_LINES = 4  # a folded text cell shows at most about this many lines in a terminal


def _clipped_text(rows: list[list[str]], site_cols: set[int], widths: list[int]) -> list[list[str]]:
    """Text cells that would fold over more than :data:`_FOLD_LINES` lines of their column
    (a C++ kernel's full template signature runs to dozens) end in "…" there; the JSON, Markdown
    and HTML reports keep them whole."""
    out = []
    for r in rows:
        row = list(r)
        for j, cell in enumerate(row):
            room = widths[j] * _FOLD_LINES if j < len(widths) else 0
            if j not in site_cols and room and len(cell) > room:
                row[j] = cell[: room - 8].rstrip() + " …"
        out.append(row)
    return out


def _site_least(sites: Iterable[str]) -> int:
    """The narrowest a site column may get: every site's file name and line whole
    (``…/train.py:38``), up to ``_SITE_MAX``."""
    shortest = (len(s) if "/" not in s else len(s.rsplit("/", 1)[1]) + 2 for s in sites)
    return max(_SITE_MIN, min(_SITE_MAX, max(shortest, default=0)))


def _shortened_sites(
    rows: list[list[str]], site_cols: set[int], widths: list[int]
) -> list[list[str]]:
    """Sites too wide for their column lose leading folders (``…/slow_dataset.py:56``) rather than
    folding inside a file name; the whole path is in the JSON and HTML reports."""
    return [
        [_short_site(c, widths[j]) if j in site_cols else c for j, c in enumerate(r)] for r in rows
    ]


def _short_site(site: str, width: int) -> str:
    if len(site) <= width:
        return site
    parts = site.split("/")
    for k in range(1, len(parts)):
        tail = "…/" + "/".join(parts[k:])
        if len(tail) <= width:
            return tail
    return site if len(parts) == 1 else "…/" + parts[-1]  # only the file name: it may fold


def _records(columns: list[str], rows: list[list[str]]) -> RenderableType:
    """Rows as blocks of ``column: value`` lines (the fallback for tables too wide to lay out)."""
    label_w = max((len(col) for col in columns), default=0)
    out = Text()
    for i, row in enumerate(rows):
        if i:
            out.append("\n")
        for j, col in enumerate(columns):
            out.append(f"  {col.ljust(label_w)}  ", style="dim")
            out.append((row[j] if j < len(row) else MISSING) + "\n")
    out.rstrip()
    return out


def _needed_width(columns: list[str], rows: list[list[str]]) -> int:
    """Columns' natural widths (longest cell, or longest header word) plus rich's padding."""
    widths = []
    for j, col in enumerate(columns):
        words = max((len(w) for w in col.split()), default=0)
        cells = max((len(r[j]) for r in rows if j < len(r)), default=0)
        widths.append(max(words, cells))
    return sum(widths) + 3 * max(0, len(columns) - 1)  # " " padding on both sides + the divider


def _transpose(
    columns: list[str], rows: list[list[str]], numeric: set[int]
) -> tuple[list[str], list[list[str]], set[int]]:
    """Rows become columns, headed by the first column's value (``rank 0``, ``rank 1``, ...)."""
    head = [""] + [f"{columns[0]} {r[0]}" if r else "" for r in rows]
    body = [
        [columns[j]] + [r[j] if j < len(r) else MISSING for r in rows]
        for j in range(1, len(columns))
    ]
    all_numeric = all(j in numeric for j in range(1, len(columns)))
    return head, body, set(range(1, len(head))) if all_numeric else set()
