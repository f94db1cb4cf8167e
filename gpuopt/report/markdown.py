"""``--format md``: GitHub-flavoured Markdown for CI job summaries and PR comments.

Headline first (status, step time, breakdown, findings), the detail tables folded into
``<details>`` so a PR comment stays short. Every string from the document is escaped for a table
cell: Markdown punctuation is backslash-escaped, ``<``/``>``/``&`` become entities (GitHub renders
some raw HTML), ``|`` cannot split a cell, and newlines cannot end a row.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

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
from gpuopt.units import fmt_duration, fmt_frac, fmt_speedup, fmt_util, num, one_line

if TYPE_CHECKING:
    from gpuopt.model.profile import Finding, Profile

_SEVERITY_MARK = {"high": "🔴 high", "medium": "🟠 medium", "low": "🟡 low"}
# Inline-significant punctuation (cells never start a line, so list/heading markers at a line
# start cannot occur; "#" and "!" are escaped anyway, "$" because GitHub renders $math$).
_MD_SPECIAL = re.compile(r"([\\`*_\[\]#!|~$])")


def md(value: Any) -> str:
    """Escape text for inline Markdown (one line; safe inside a table cell)."""
    s = one_line(value)
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

    def render(self, profile: Profile) -> str:
        lines: list[str] = []
        lines += self.header(profile)
        lines += self.step_time(profile)
        lines += self.breakdown(profile)
        lines += self.utilization(profile)
        lines += self.findings(profile)
        for section in detail_sections(profile):
            lines += self.section(section)
        warnings = h.warnings_list(profile)
        if warnings:
            lines += ["### Warnings", ""] + [f"- ⚠️ {md(w)}" for w in warnings] + [""]
        cost = h.overhead_line(profile)
        if cost:
            lines += [f"<sub>{md(cost)}</sub>", ""]
        return "\n".join(lines).rstrip("\n") + "\n"

    def header(self, profile: Profile) -> list[str]:
        facts = h.header_facts(profile)
        d = dict(facts)
        out = [
            f"## gpuopt: {md(d['script'])} — {md(profile.status)} (exit code {md(d['exit code'])})",
            "",
        ]
        err = h.error_line(profile)
        if err:
            label = "Error" if profile.status == "error" else "Note"
            out += [f"> **{label}:** {md(err)}", ""]
        rows = [[md(k), md(v)] for k, v in facts if k not in ("script", "status", "exit code")]
        out += _table(["", ""], rows) + [""]
        return out

    def step_time(self, profile: Profile) -> list[str]:
        out = ["### Step time", ""]
        stats = h.step_stats(profile)
        if all(v is None for _, v in stats):
            return out + [
                "No measured steps (gpuopt counts a step at each `optimizer.step()`, without an "
                "optimizer at each `loss.backward()`; elsewhere add `import gpuopt` and call "
                "`gpuopt.step()` once per step).",
                "",
            ]
        out += _table(
            [label for label, _ in stats],
            [[md(fmt_duration(v)) for _, v in stats]],
            right={0, 1, 2, 3},
        )
        measured = [r.time_s for r in h.step_series(profile) if not r.warmup]
        if len(measured) >= 2:
            line = spark(resample(measured, 60), 0.0, max(measured))
            out += ["", f"Measured steps over time ({len(measured)}, warm-up left out): {line}"]
        return out + [""]

    def breakdown(self, profile: Profile) -> list[str]:
        out = ["### Where step time goes", ""]
        items = h.breakdown_items(profile.breakdown)
        if not items:
            return out + ["No breakdown: no measured steps.", ""]
        lengths = bar_lengths([f for _, _, f in items], 40)
        rows = [
            [md(label), md(fmt_frac(frac)), "█" * n if n else " "]
            for (_, label, frac), n in zip(items, lengths, strict=True)
        ]
        return out + _table(["part", "share of step time", ""], rows, right={1}) + [""]

    def utilization(self, profile: Profile) -> list[str]:
        out = ["### Utilization", ""]
        tl = u.timeline(profile)
        rows = [
            row for key in ("cpu", "gpu") if (row := _utilization_row(profile, key, tl)) is not None
        ]
        note = u.utilization_note(profile)
        if rows:
            out += _table(["", "mean", "max", "over time"], rows, right={1, 2})
            out.append("")
            sampling = u.sampling_note(profile, tl)
            if sampling:
                out += [f"Sampled: {md(sampling)}.", ""]
        if note:
            out += [f"_{md(note)}_", ""]
        if not rows and not note:
            out += ["No utilization samples.", ""]
        return out

    def findings(self, profile: Profile) -> list[str]:
        findings = ordered_findings(profile)
        out = ["### Findings", ""]
        if not findings:
            return out + [md(no_findings_message(profile)), ""]
        notes = Footnotes()
        rows = [
            [
                str(i),
                _SEVERITY_MARK.get(f.severity, md(f.severity)),
                _finding_cell(f),
                md(f.site) or " ",
                _estimate(f, notes),
            ]
            for i, f in enumerate(findings, 1)
        ]
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


def _utilization_row(profile: Profile, key: str, tl: u.TimelineView | None) -> list[str] | None:
    """``CPU | 22% (≈1.7 of 8 cores busy) | 37% | ▁▂▅█``; None when not measured."""
    mean, mx = u.utilization_summary(profile, key)
    values = tl.series.get(key) if tl is not None else None
    if mean is None and mx is None and values is None:
        return None
    cores = u.cpu_cores_note(profile) if key == "cpu" else ""
    mean_text = md(fmt_util(mean)) + (f" ({md(cores)})" if cores else "")
    over_time = spark(resample(values, 60), 0.0, 100.0) if values else " "
    return [key.upper(), mean_text, md(fmt_util(mx)), over_time]


def _finding_cell(f: Finding) -> str:
    """Title and id, the evidence (summary and numbers) and the fix, as ``<br>``-joined lines."""
    parts = [f"**{md(f.title or f.id)}** ({md(f.id)})"]
    summary = evidence_summary(f)
    if summary:
        parts.append(md(summary))
    numbers = evidence_numbers(f, limit=6)
    if numbers:
        parts.append(" · ".join(f"{md(k)} {md(v)}" for k, v in numbers))
    if one_line(f.fix):
        parts.append(f"**fix:** {md(f.fix)}")
    return "<br>".join(parts)


def _estimate(f: Finding, notes: Footnotes) -> str:
    """``est. 1.25× \\[1\\]`` (a footnote names the model), or a blank cell."""
    if num(f.est_speedup) is None:
        return " "
    ref = notes.ref(f.estimate_model)
    return md(fmt_speedup(f.est_speedup)) + (f" \\[{ref}\\]" if ref else " \\(no model\\)")


def _html_text(value: Any) -> str:
    """Text inside the raw-HTML ``<summary>`` tag: entities only (Markdown is not parsed there)."""
    import html

    return html.escape(one_line(value), quote=True)
