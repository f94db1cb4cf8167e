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
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gpuopt.report import common as c
from gpuopt.report.base import Renderer
from gpuopt.report.common import bar_lengths, spark
from gpuopt.report.sections import Section, detail_sections

_SEGMENT_STYLE = {
    "data_wait": "red",
    "h2d": "magenta",
    "sync": "yellow",
    "compute": "green",
    "other": "bright_black",
}
_SEGMENT_CHAR = {
    "data_wait": "D",
    "h2d": "H",
    "sync": "S",
    "compute": "C",
    "other": "o",
}  # plain text
_SEVERITY_STYLE = {"high": "bold red", "medium": "bold yellow", "low": "cyan"}
_STATUS_STYLE = {
    "ok": "bold green",
    "error": "bold white on red",
    "interrupted": "bold black on yellow",
}
_FULL_FINDINGS = 8  # findings shown with evidence and fix; the rest get one line each


class TextRenderer(Renderer):
    """Rich text for a terminal; ``color=False`` gives plain text with no escape codes."""

    name = "text"

    def render(self, doc: dict[str, Any]) -> str:
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
        console.print(Group(*self.parts(doc)))
        # rich pads every line to the full width; trailing blanks only get in the way (diffs, CI logs)
        return "\n".join(line.rstrip(" ") for line in buf.getvalue().split("\n"))

    # --- sections -------------------------------------------------------------------------

    def parts(self, doc: dict[str, Any]) -> list[RenderableType]:
        out: list[RenderableType] = [self.header(doc)]
        out.append(self.step_time(doc))
        out.append(self.breakdown(doc))
        out.append(self.utilization(doc))
        out.append(self.findings(doc))
        for section in detail_sections(doc):
            out.append(self.table(section))
        warnings = c.warnings_list(doc)
        if warnings:
            t = Text()
            t.append("warnings\n", style="bold")
            for w in warnings:
                t.append("  ! ", style="yellow")
                t.append(c.printable(w) + "\n")
            t.rstrip()
            out.append(Padding(t, (1, 0, 0, 0)))
        return out

    def header(self, doc: dict[str, Any]) -> RenderableType:
        facts = dict(c.header_facts(doc))
        status = c.one_line(doc.get("status")) or c.MISSING
        title = Text()
        title.append("gpuopt ", style="bold")
        title.append(c.printable(facts["script"]), style="bold cyan")
        title.append("  ")
        title.append(f" {status.upper()} ", style=_STATUS_STYLE.get(status, "bold"))
        title.append(f"  exit code {c.printable(facts['exit code'])}")
        if doc.get("source") == "trace":
            title.append("  (from a profiler trace)", style="dim")
        lines = [title]
        for keys in (("device", "wall time"), ("steps",)):
            info = Text()
            for i, key in enumerate(keys):
                if i:
                    info.append("   ")
                info.append(f"{key} ", style="dim")
                info.append(c.printable(facts[key]))
            lines.append(info)
        err = c.error_line(doc)
        if err:
            lines.append(
                Text(
                    ("error: " if doc.get("status") == "error" else "note: ") + c.printable(err),
                    style="red" if doc.get("status") == "error" else "yellow",
                )
            )
        return Group(*lines)

    def step_time(self, doc: dict[str, Any]) -> RenderableType:
        t = Text()
        t.append("step time  ", style="bold")
        stats = c.step_stats(doc)
        if all(v is None for _, v in stats):
            t.append("no measured steps", style="yellow")
            if (c.num(c.get(doc, "steps", "count")) or 0) == 0:
                t.append(
                    " (gpuopt counts a step at each optimizer.step() or gpuopt.step())", style="dim"
                )
            return Padding(t, (1, 0, 0, 0))
        for i, (label, value) in enumerate(stats):
            if i:
                t.append("   ")
            t.append(f"{label} ", style="dim")
            t.append(c.fmt_duration(value), style="bold" if label == "median" else "")
        series = c.step_series(doc)
        lines: list[RenderableType] = [t]
        if len(series) >= 2:
            width = max(10, self.width - 30)
            times = [r["time_s"] for r in series]
            warm = [r["warmup"] for r in series]
            n_warm = sum(warm)
            measured = [x for x, w in zip(times, warm, strict=True) if not w] or times
            hi = max(measured)
            line = Text()
            line.append("per step   ", style="dim")
            if len(series) <= width:
                for x, w in zip(times, warm, strict=True):
                    line.append(
                        spark([x], 0.0, hi) if x <= hi else "↑", style="dim" if w else "cyan"
                    )
            else:
                line.append(
                    spark(c.resample([float(x) for x in times], width), 0.0, hi), style="cyan"
                )
            line.append(f"  max {c.fmt_duration(max(times))}", style="dim")
            lines.append(line)
            if len(series) > width:
                lines.append(
                    Text(
                        f"           {len(series)} steps, each mark the mean of ~{len(series) / width:.1f}",
                        style="dim",
                    )
                )
            if n_warm and len(series) <= width:
                lines.append(
                    Text(
                        f"           {n_warm} warm-up step(s) dimmed, ↑ = above the scale (slower than any measured step)",
                        style="dim",
                    )
                )
        return Padding(Group(*lines), (1, 0, 0, 0))

    def breakdown(self, doc: dict[str, Any]) -> RenderableType:
        items = c.breakdown_items(doc)
        head = Text("where step time goes", style="bold")
        if not items:
            return Padding(
                Group(head, Text("no breakdown: no measured steps", style="yellow")), (1, 0, 0, 0)
            )
        width = self.width - 2
        lengths = bar_lengths([f for _, _, f in items], width)
        bar = Text(" ")
        for (key, _, _), n in zip(items, lengths, strict=True):
            if n:
                bar.append(
                    ("█" if self.color else _SEGMENT_CHAR[key]) * n, style=_SEGMENT_STYLE[key]
                )
        legend = Text(" ")
        for i, (key, label, frac) in enumerate(items):
            if i:
                legend.append("   ")
            legend.append(
                ("■" if self.color else _SEGMENT_CHAR[key]) + " ", style=_SEGMENT_STYLE[key]
            )
            legend.append(f"{label} ")
            legend.append(c.fmt_frac(frac), style="bold")
        return Padding(Group(head, bar, legend), (1, 0, 0, 0))

    def utilization(self, doc: dict[str, Any]) -> RenderableType:
        head = Text("utilization", style="bold")
        tl = c.timeline(doc)
        sampling = c.sampling_note(doc, tl)
        if sampling:
            head.append(f"  ({sampling})", style="dim")
        lines: list[RenderableType] = [head]
        note = c.utilization_note(doc)
        spark_width = max(10, self.width - 52)
        for key, label in (("cpu", "CPU"), ("gpu", "GPU")):
            mean, mx = c.utilization_summary(doc, key)
            values = tl.series.get(key) if tl is not None else None
            if values is None and mean is None and mx is None:
                # the note says why; it is shown once: on the GPU line, or below when GPU was measured
                with_note = note and key == "gpu"
                lines.append(
                    Text(
                        f" {label}  not measured" + (f": {c.printable(note)}" if with_note else ""),
                        style="dim",
                    )
                )
                continue
            line = Text(f" {label}  ")
            if values is not None:
                line.append(
                    spark(c.resample(values, spark_width), 0.0, 100.0).ljust(spark_width),
                    style="green" if key == "gpu" else "blue",
                )
                line.append("  ")
            line.append("mean ", style="dim")
            line.append(c.fmt_util(mean))
            line.append("  max ", style="dim")
            line.append(c.fmt_util(mx))
            if key == "cpu" and c.cpu_cores_note(doc):
                line.append(f"  {c.cpu_cores_note(doc)}", style="dim")
            lines.append(line)
        if note and c.gpu_utilization_measured(doc):
            lines.append(Text(f" note: {c.printable(note)}", style="dim"))
        if tl is not None:
            mem = Text(" memory ", style="dim")
            parts = []
            rss = [v for v in tl.memory.get("rss_bytes", []) if v is not None]
            gmem = [v for v in tl.memory.get("gpu_memory_bytes", []) if v is not None]
            if rss:
                parts.append(f"host RSS peak {c.fmt_bytes(max(rss))}")
            if gmem:
                parts.append(f"GPU memory peak {c.fmt_bytes(max(gmem))}")
            if parts:
                mem.append(" · ".join(parts))
                lines.append(mem)
        return Padding(Group(*lines), (1, 0, 0, 0))

    def findings(self, doc: dict[str, Any]) -> RenderableType:
        findings = c.ordered_findings(doc)
        head = Text("findings", style="bold")
        if not findings:
            return Padding(Group(head, Text(c.no_findings_message(doc), style="dim")), (1, 0, 0, 0))
        head.append("  ranked by estimated gain", style="dim")
        notes = c.Footnotes()
        grid = Table.grid(padding=(0, 1), expand=True)
        grid.add_column(width=2, justify="right")
        grid.add_column(width=6)
        grid.add_column(ratio=1)
        grid.add_column(justify="right", no_wrap=True)
        for i, f in enumerate(findings, 1):
            sev = c.one_line(f.get("severity")) or c.MISSING
            title = Text(
                c.printable(c.one_line(f.get("title")) or c.one_line(f.get("id"))), style="bold"
            )
            est = Text()
            if c.num(f.get("est_speedup")) is not None:
                est.append(c.fmt_speedup(f.get("est_speedup")), style="bold")
                ref = notes.ref(f.get("estimate_model"))
                est.append(f" [{ref}]" if ref else " [no model]", style="dim")
            if i > _FULL_FINDINGS:
                grid.add_row(
                    f"{i}", Text(sev.upper(), style=_SEVERITY_STYLE.get(sev, "")), title, est
                )
                continue
            body = Text()
            body.append_text(title)
            meta = [c.printable(c.one_line(f.get("id")))]
            if f.get("site"):
                meta.append("at " + c.printable(c.one_line(f.get("site"))))
            body.append("\n" + " · ".join(m for m in meta if m), style="dim")
            summary = c.evidence_summary(f)
            if summary:
                body.append("\n" + c.printable(summary))
            numbers = c.evidence_numbers(f, limit=6)
            if numbers:
                body.append(
                    "\n" + "  ".join(f"{c.printable(k)}={c.printable(v)}" for k, v in numbers),
                    style="dim",
                )
            fix = c.one_line(f.get("fix"))
            if fix:
                body.append("\nfix: ", style="bold green")
                body.append(c.printable(fix))
            grid.add_row(f"{i}", Text(sev.upper(), style=_SEVERITY_STYLE.get(sev, "")), body, est)
            if i < min(len(findings), _FULL_FINDINGS):
                grid.add_row("", "", "", "")
        lines: list[RenderableType] = [head, grid]
        if notes.models:
            foot = Text()
            foot.append("est. = estimated, not measured; how:", style="dim")
            for n, model in enumerate(notes.models, 1):
                foot.append(f"\n [{n}] {c.printable(model)}", style="dim")
            lines.append(foot)
        return Padding(Group(*lines), (1, 0, 0, 0))

    def table(self, section: Section) -> RenderableType:
        # title and note sit outside the table so they use the full width, not the table's
        columns, numeric = [c.printable(col) for col in section.columns], section.numeric_columns
        shown = (
            section.rows if section.compact_rows is None else section.rows[: section.compact_rows]
        )
        rows = [[c.printable(cell.text) for cell in r] for r in shown]  # widths of what is printed
        site_cols = {j for r in shown for j, cell in enumerate(r) if cell.site}
        if section.per_rank and len(rows) <= 8 and _needed_width(columns, rows) > self.width:
            # too wide for the terminal (per-rank GPU tables on a narrow one): one column per row
            # reads better than cells broken mid-number
            columns, rows, numeric = _transpose(columns, rows, numeric)
            site_cols = set()
        widths = _column_widths(columns, rows, site_cols, self.width)
        if widths is None:
            # even with headers and sites folded the columns do not fit: one block per row
            # ("name: value" lines), so no number is ever cut
            table: RenderableType = _records(columns, rows)
        else:
            table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1))
            for j, col in enumerate(columns):
                is_num = j in numeric
                table.add_column(
                    Text(col),
                    justify="right" if is_num else "left",
                    overflow="fold",
                    width=widths[j],
                )
            for row in rows:
                table.add_row(*(Text(cell) for cell in row))
        parts: list[RenderableType] = [Text(c.printable(section.title), style="bold"), table]
        hidden = len(section.rows) - len(shown)
        if hidden:
            parts.append(
                Text(
                    f"… {hidden} more rows: gpuopt report DIR --format html (or json)", style="dim"
                )
            )
        if section.note:
            parts.append(Text(c.printable(section.note), style="dim"))
        return Padding(Group(*parts), (1, 0, 0, 0))


_SITE_MIN = 16  # a folded site column keeps at least this many characters per line
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
    widths = [min(_SITE_MIN, natural[j]) if j in flexible else max(1, cells[j]) for j in range(n)]
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
    return widths


def _records(columns: list[str], rows: list[list[str]]) -> RenderableType:
    """Rows as blocks of ``column: value`` lines (the fallback for tables too wide to lay out)."""
    label_w = max((len(col) for col in columns), default=0)
    out = Text()
    for i, row in enumerate(rows):
        if i:
            out.append("\n")
        for j, col in enumerate(columns):
            out.append(f"  {col.ljust(label_w)}  ", style="dim")
            out.append((row[j] if j < len(row) else c.MISSING) + "\n")
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
        [columns[j]] + [r[j] if j < len(r) else c.MISSING for r in rows]
        for j in range(1, len(columns))
    ]
    all_numeric = all(j in numeric for j in range(1, len(columns)))
    return head, body, set(range(1, len(head))) if all_numeric else set()
