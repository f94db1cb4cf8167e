"""``gpuopt compare``'s formats: text, Markdown, JSON (``gpuopt.compare/1``) and one
self-contained HTML page (no script, no network: a Content-Security-Policy forbids both; every
string from the documents goes through ``html.escape``)."""

from __future__ import annotations

import html
import json
from dataclasses import asdict

from gpuopt.gate.compare import Comparison, FindingChange, Row

SCHEMA = "gpuopt.compare/1"
FORMATS = ("text", "md", "json", "html")
_GROUPS = ("steps", "breakdown", "utilization", "counters")
_TITLES = {
    "steps": "Steps",
    "breakdown": "Where step time goes",
    "utilization": "Utilization",
    "counters": "Exact counters (per step)",
    "kernel types": "GPU time per step by kernel type",
    "kernels": "Kernels whose time per step changed most",
}


def _letter(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else f"#{i + 1}"


def _header(c: Comparison) -> list[str]:
    cols = [_letter(i) for i in range(len(c.runs))]
    cols += [f"{_letter(i)} vs A" for i in range(1, len(c.runs))]
    return cols


def _cells(row: Row) -> list[str]:
    changes = [
        ch + (f" ({iv})" if iv else "")
        for ch, iv in zip(row.changes, row.intervals or [""] * len(row.changes), strict=True)
    ]
    return [*row.values, *changes]


def _table_rows(rows: list[Row], group: str | None) -> list[Row]:
    return [r for r in rows if group is None or r.group == group]


def _run_line(i: int, c: Comparison) -> str:
    r = c.runs[i]
    ranks = f" · {r.ranks} ranks" if r.ranks > 1 else ""
    # a trace's "script" is its own path: said once
    script = f"{r.script} · " if r.script and r.script != r.path else ""
    return (
        f"{_letter(i)} = {r.path}: {script}{r.source} · {r.device} · "
        f"{r.steps} measured steps{ranks} · {r.status}"
    )


def _finding_line(f: FindingChange) -> str:
    sev = f"{f.before or '–'} → {f.after or '–'}"
    where = f" at {f.site}" if f.site else ""
    detail = f" ({f.detail})" if f.detail else ""
    return f"{f.status:<8} {f.id}{where}: {sev}; {f.title}{detail}"


def _text_table(title: str, header: list[str], rows: list[Row], first: str = "") -> list[str]:
    body = [[r.metric if not first else f"{r.group} {r.metric}", *_cells(r)] for r in rows]
    head = [title, *header]
    widths = [max(len(x[j]) for x in [head, *body]) for j in range(len(head))]
    widths[0] = min(widths[0], 60)
    out = []
    for cells in [head, *body]:
        name = cells[0] if len(cells[0]) <= 60 else cells[0][:57] + "..."
        rest = "  ".join(f"{x:>{w}}" for x, w in zip(cells[1:], widths[1:], strict=True))
        out.append(f"{name:<{widths[0]}}  {rest}".rstrip())
    return out


def render_text(c: Comparison) -> str:
    lines = ["gpuopt compare", *(_run_line(i, c) for i in range(len(c.runs))), ""]
    header = _header(c)
    for group in _GROUPS:
        rows = _table_rows(c.rows, group)
        if rows:
            lines += [*_text_table(_TITLES[group], header, rows), ""]
    if c.ranks:
        lines += [*_text_table("Per rank", header, c.ranks, first="rank"), ""]
    for group in ("kernel types", "kernels"):
        rows = _table_rows(c.kernels, group)
        if rows:
            lines += [*_text_table(_TITLES[group], header, rows), ""]
    for i, changes in enumerate(c.findings, 1):
        lines.append(f"Findings, {_letter(i)} vs A")
        lines += [f"  {_finding_line(f)}" for f in changes] or ["  no change"]
        lines.append("")
    lines += [f"note: {n}" for n in c.notes]
    return "\n".join(lines).rstrip() + "\n"


def render_markdown(c: Comparison) -> str:
    from gpuopt.report.markdown import md

    lines = ["## gpuopt compare", ""]
    lines += [f"- {md(_run_line(i, c))}" for i in range(len(c.runs))]
    header = ["", *_header(c)]

    def table(title: str, rows: list[Row], rank: bool = False) -> list[str]:
        out = [f"### {md(title)}", "", "| " + " | ".join(md(h) for h in header) + " |"]
        out.append("|---|" + "---:|" * (len(header) - 1))
        for r in rows:
            name = f"{r.group} {r.metric}" if rank else r.metric
            out.append("| " + " | ".join(md(x) for x in [name, *_cells(r)]) + " |")
        return [*out, ""]

    lines.append("")
    for group in _GROUPS:
        rows = _table_rows(c.rows, group)
        if rows:
            lines += table(_TITLES[group], rows)
    if c.ranks:
        lines += table("Per rank", c.ranks, rank=True)
    for group in ("kernel types", "kernels"):
        rows = _table_rows(c.kernels, group)
        if rows:
            lines += table(_TITLES[group], rows)
    for i, changes in enumerate(c.findings, 1):
        lines += [f"### Findings, {_letter(i)} vs A", ""]
        lines += [f"- {md(_finding_line(f))}" for f in changes] or ["- no change"]
        lines.append("")
    lines += [f"- note: {md(n)}" for n in c.notes]
    return "\n".join(lines).rstrip() + "\n"


def render_json(c: Comparison) -> str:
    doc = {"schema": SCHEMA, **asdict(c)}
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


_CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
_CSS = (
    "body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;"
    "color:#1d2330;background:#fbfbfc}table{border-collapse:collapse;margin:8px 0 20px}"
    "th,td{border-bottom:1px solid #e3e6eb;padding:4px 10px;text-align:right}"
    "th:first-child,td:first-child{text-align:left;max-width:520px;overflow-wrap:break-word}"
    ".up{color:#b3261e}.down{color:#1f7a3d}.muted{color:#5f6775}code{font-size:90%}"
    ".tablewrap{overflow-x:auto}.chartbox{overflow-x:auto;margin:8px 0 20px}"
    ".chart{display:block;max-width:100%;height:auto}"
)


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _html_table(title: str, header: list[str], rows: list[Row], rank: bool = False) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in ["", *header])
    body = []
    for r in rows:
        name = f"{r.group} {r.metric}" if rank else r.metric
        cells = "".join(f"<td>{_esc(x)}</td>" for x in _cells(r))
        body.append(f"<tr><td>{_esc(name)}</td>{cells}</tr>")
    return (
        f'<h2>{_esc(title)}</h2>\n<div class="tablewrap"><table><thead><tr>{head}</tr></thead>'
        "<tbody>" + "".join(body) + "</tbody></table></div>"
    )


def _chart(c: Comparison) -> str:
    """Every metric measured in the first run and another, as bars run by run."""
    from gpuopt.report.svg import MetricBars, metric_bars

    metrics = [
        MetricBars(
            r.metric,
            list(r.numbers),
            [r.values[0], *(f"{v} ({ch})" for v, ch in zip(r.values[1:], r.changes, strict=False))],
        )
        for r in c.rows
        if r.numbers and r.numbers[0] is not None and any(v is not None for v in r.numbers[1:])
    ]
    chart = metric_bars(metrics, [_letter(i) for i in range(len(c.runs))])
    if not chart:
        return ""
    return (
        '<h2>Each metric, run by run</h2>\n<p class="muted">each metric on its own scale: its '
        "largest value is the longest bar</p>\n"
        f'<div class="chartbox">{chart}</div>'
    )


def render_html(c: Comparison) -> str:
    header = _header(c)
    parts = ["<h1>gpuopt compare</h1>", "<ul>"]
    parts += [f"<li>{_esc(_run_line(i, c))}</li>" for i in range(len(c.runs))]
    parts.append("</ul>")
    chart = _chart(c)
    if chart:
        parts.append(chart)
    for group in _GROUPS:
        rows = _table_rows(c.rows, group)
        if rows:
            parts.append(_html_table(_TITLES[group], header, rows))
    if c.ranks:
        parts.append(_html_table("Per rank", header, c.ranks, rank=True))
    for group in ("kernel types", "kernels"):
        rows = _table_rows(c.kernels, group)
        if rows:
            parts.append(_html_table(_TITLES[group], header, rows))
    for i, changes in enumerate(c.findings, 1):
        parts.append(f"<h2>Findings, {_esc(_letter(i))} vs A</h2><ul>")
        parts += [f"<li>{_esc(_finding_line(f))}</li>" for f in changes] or ["<li>no change</li>"]
        parts.append("</ul>")
    parts += [f'<p class="muted">note: {_esc(n)}</p>' for n in c.notes]
    body = "\n".join(parts)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_esc(_CSP)}">\n'
        '<meta name="referrer" content="no-referrer">\n'
        f"<title>gpuopt compare</title>\n<style>{_CSS}</style>\n</head>\n<body>\n<main>\n"
        f"{body}\n</main>\n</body>\n</html>\n"
    )


def render(c: Comparison, fmt: str) -> str:
    return {
        "text": render_text,
        "md": render_markdown,
        "json": render_json,
        "html": render_html,
    }[fmt](c)
