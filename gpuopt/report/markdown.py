"""``--format md``: GitHub-flavoured Markdown for CI job summaries and PR comments.

Headline first (status, step time, breakdown, findings), the detail tables folded into
``<details>`` so a PR comment stays short. Every string from the document is escaped for a table
cell: Markdown punctuation is backslash-escaped, ``<``/``>``/``&`` become entities (GitHub renders
some raw HTML), ``|`` cannot split a cell, and newlines cannot end a row.
"""

from __future__ import annotations

import re
from typing import Any

from gpuopt.report import common as c
from gpuopt.report.base import Renderer
from gpuopt.report.common import bar_lengths, spark
from gpuopt.report.sections import Section, detail_sections

_SEVERITY_MARK = {"high": "🔴 high", "medium": "🟠 medium", "low": "🟡 low"}
# Inline-significant punctuation (cells never start a line, so list/heading markers at a line
# start cannot occur; "#" and "!" are escaped anyway, "$" because GitHub renders $math$).
_MD_SPECIAL = re.compile(r"([\\`*_\[\]#!|~$])")


def md(value: Any) -> str:
    """Escape text for inline Markdown (one line; safe inside a table cell)."""
    s = c.one_line(value)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", s)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cell if cell else " " for cell in cells) + " |"


def _table(columns: list[str], rows: list[list[str]], right: set[int] | None = None) -> list[str]:
    right = right or set()
    out = [_row([md(col) for col in columns])]
    out.append("|" + "|".join("---:" if j in right else "---" for j in range(len(columns))) + "|")
    out.extend(_row(r) for r in rows)
    return out


class MarkdownRenderer(Renderer):
    name = "md"

    def render(self, doc: dict[str, Any]) -> str:
        lines: list[str] = []
        lines += self.header(doc)
        lines += self.step_time(doc)
        lines += self.breakdown(doc)
        lines += self.utilization(doc)
        lines += self.findings(doc)
        for section in detail_sections(doc):
            lines += self.section(section)
        warnings = c.warnings_list(doc)
        if warnings:
            lines += ["### Warnings", ""] + [f"- ⚠️ {md(w)}" for w in warnings] + [""]
        return "\n".join(lines).rstrip("\n") + "\n"

    def header(self, doc: dict[str, Any]) -> list[str]:
        facts = c.header_facts(doc)
        status = c.one_line(doc.get("status")) or c.MISSING
        script = dict(facts)["script"]
        out = [
            f"## gpuopt: {md(script)} — {md(status)} (exit code {md(dict(facts)['exit code'])})",
            "",
        ]
        err = c.error_line(doc)
        if err:
            label = "Error" if doc.get("status") == "error" else "Note"
            out += [f"> **{label}:** {md(err)}", ""]
        rows = [[md(k), md(v)] for k, v in facts if k not in ("script", "status", "exit code")]
        out += _table(["", ""], rows) + [""]
        return out

    def step_time(self, doc: dict[str, Any]) -> list[str]:
        out = ["### Step time", ""]
        stats = c.step_stats(doc)
        if all(v is None for _, v in stats):
            return out + [
                "No measured steps (gpuopt counts a step at each `optimizer.step()` or `gpuopt.step()`).",
                "",
            ]
        out += _table(
            [label for label, _ in stats],
            [[md(c.fmt_duration(v)) for _, v in stats]],
            right={0, 1, 2, 3},
        )
        series = c.step_series(doc)
        measured = [r["time_s"] for r in series if not r["warmup"]]
        if len(measured) >= 2:
            line = spark(c.resample([float(x) for x in measured], 60), 0.0, max(measured))
            out += ["", f"Measured steps over time ({len(measured)}, warm-up left out): {line}"]
        return out + [""]

    def breakdown(self, doc: dict[str, Any]) -> list[str]:
        out = ["### Where step time goes", ""]
        items = c.breakdown_items(doc)
        if not items:
            return out + ["No breakdown: no measured steps.", ""]
        lengths = bar_lengths([f for _, _, f in items], 40)
        rows = [
            [md(label), md(c.fmt_frac(frac)), "█" * n if n else " "]
            for (_, label, frac), n in zip(items, lengths, strict=True)
        ]
        return out + _table(["part", "share of step time", ""], rows, right={1}) + [""]

    def utilization(self, doc: dict[str, Any]) -> list[str]:
        out = ["### Utilization", ""]
        tl = c.timeline(doc)
        rows = []
        for key, label in (("cpu", "CPU"), ("gpu", "GPU")):
            mean, mx = c.utilization_summary(doc, key)
            values = tl.series.get(key) if tl is not None else None
            if mean is None and mx is None and values is None:
                continue
            mean_text = md(c.fmt_util(mean)) + (
                f" ({md(c.cpu_cores_note(doc))})" if key == "cpu" and c.cpu_cores_note(doc) else ""
            )
            rows.append(
                [
                    label,
                    mean_text,
                    md(c.fmt_util(mx)),
                    spark(c.resample(values, 60), 0.0, 100.0) if values else " ",
                ]
            )
        note = c.utilization_note(doc)
        if rows:
            out += _table(["", "mean", "max", "over time"], rows, right={1, 2})
            out.append("")
            sampling = c.sampling_note(doc, tl)
            if sampling:
                out += [f"Sampled: {md(sampling)}.", ""]
        if note:
            out += [f"_{md(note)}_", ""]
        if not rows and not note:
            out += ["No utilization samples.", ""]
        return out

    def findings(self, doc: dict[str, Any]) -> list[str]:
        findings = c.ordered_findings(doc)
        out = ["### Findings", ""]
        if not findings:
            return out + [md(c.no_findings_message(doc)), ""]
        notes = c.Footnotes()
        rows = []
        for i, f in enumerate(findings, 1):
            sev = c.one_line(f.get("severity"))
            parts = [f"**{md(f.get('title') or f.get('id'))}** ({md(f.get('id'))})"]
            summary = c.evidence_summary(f)
            if summary:
                parts.append(md(summary))
            numbers = c.evidence_numbers(f, limit=6)
            if numbers:
                parts.append(" · ".join(f"{md(k)} {md(v)}" for k, v in numbers))
            if c.one_line(f.get("fix")):
                parts.append(f"**fix:** {md(f.get('fix'))}")
            est = " "
            if c.num(f.get("est_speedup")) is not None:
                ref = notes.ref(f.get("estimate_model"))
                est = md(c.fmt_speedup(f.get("est_speedup"))) + (
                    f" \\[{ref}\\]" if ref else " \\(no model\\)"
                )
            rows.append(
                [
                    str(i),
                    _SEVERITY_MARK.get(sev, md(sev)),
                    "<br>".join(parts),
                    md(f.get("site")) or " ",
                    est,
                ]
            )
        out += _table(["#", "severity", "finding", "site", "est. speedup"], rows, right={0, 4})
        if notes.models:
            out += ["", "est. = estimated, not measured; how:", ""]
            out += [f"\\[{n}\\] {md(m)}  " for n, m in enumerate(notes.models, 1)]
        return out + [""]

    def section(self, section: Section) -> list[str]:
        out = [
            "<details>",
            f"<summary><b>{_html_text(section.title)}</b> ({len(section.rows)} rows)</summary>",
            "",
        ]
        rows = [[md(cell.text) for cell in row] for row in section.rows]
        out += _table(section.columns, rows, right=section.numeric_columns)
        if section.note:
            out += ["", f"_{md(section.note)}_"]
        return out + ["", "</details>", ""]


def _html_text(value: Any) -> str:
    """Text inside the raw-HTML ``<summary>`` tag: entities only (Markdown is not parsed there)."""
    import html

    return html.escape(c.one_line(value), quote=True)
