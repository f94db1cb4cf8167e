"""``gpuopt report DIR`` on a ``gpuopt optimize`` directory: ``optimize.json`` read back (never
re-run), checked against its schema, and drawn in every format: text, Markdown, JSON, and HTML
with a before/after chart (self-contained, every string escaped)."""

from __future__ import annotations

import html
from pathlib import Path

import msgspec

from gpuopt.errors import GpuoptError
from gpuopt.model.optimize import OPTIMIZE_SCHEMA, OptimizeDocument
from gpuopt.optimize.output.render import detail_lines, headline, render_markdown, render_text


def load_optimize(path: Path) -> OptimizeDocument:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise GpuoptError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        doc = msgspec.json.decode(data, type=OptimizeDocument)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise GpuoptError(f"{path}: not a valid optimize.json: {exc}") from None
    except RecursionError:  # msgspec's own depth limit
        raise GpuoptError(f"{path}: not a valid optimize.json: nested too deeply") from None
    if doc.schema != OPTIMIZE_SCHEMA:
        raise GpuoptError(f"{path}: schema {doc.schema!r}; this gpuopt reads {OPTIMIZE_SCHEMA}")
    return doc


def render(doc: OptimizeDocument, fmt: str) -> str:
    if fmt == "json":
        return (msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n").decode()
    if fmt == "md":
        return render_markdown(doc)
    if fmt == "html":
        return render_html(doc)
    return render_text(doc) + "\n"


def _chart(doc: OptimizeDocument) -> str:
    """Horizontal bars: steps/s of every run, baseline and candidate coloured apart."""
    runs = [r for r in doc.runs if r.steps_per_s]
    if not runs:
        return "<p>No run measured steps.</p>"
    top = max(r.steps_per_s or 0.0 for r in runs)
    colour = {"baseline": "#8c8c8c", "candidate": "#2b7bba", "ablation": "#9ecae1"}
    bars = []
    for i, r in enumerate(runs):
        w = 400 * (r.steps_per_s or 0.0) / top
        y = 22 * i
        bars.append(
            f'<text x="0" y="{y + 14}" font-size="12">{html.escape(r.label)}</text>'
            f'<rect x="150" y="{y + 3}" width="{w:.1f}" height="15" fill="{colour[r.role]}"/>'
            f'<text x="{155 + w:.1f}" y="{y + 14}" font-size="12">{r.steps_per_s:.2f}/s</text>'
        )
    height = 22 * len(runs) + 4
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="640" height="{height}" '
        f'role="img" aria-label="steps per second of each run">{"".join(bars)}</svg>'
    )


def render_html(doc: OptimizeDocument) -> str:
    e = html.escape
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{e(c)}</td>"
            for c in (
                f.id,
                f.mode,
                "yes" if f.applied else "no",
                f.verified if f.applied else "—",
                f"{f.gain:.2f}x" if f.gain else "—",
                f.reason,
            )
        )
        + "</tr>"
        for f in doc.fixes
    )
    head = "".join(f"<li>{e(line)}</li>" for line in headline(doc)[1:])
    diff = f"<h2>Source changes</h2><pre>{e(doc.diff)}</pre>" if doc.diff else ""
    warn = "".join(f"<li>{e(w)}</li>" for w in doc.warnings)
    details = "".join(f"<li>{e(line)}</li>" for line in detail_lines(doc))
    details = f"<ul>{details}</ul>" if details else ""
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>gpuopt optimize: {e(doc.script)}</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}"
        "td,th{border-bottom:1px solid #ddd;padding:.2em .6em;text-align:left}"
        "pre{background:#f6f6f6;padding:1em;overflow:auto}</style></head><body>"
        f"<h1>gpuopt optimize: {e(doc.script)}</h1><ul>{head}</ul>"
        f"<h2>Steps per second, run by run</h2>{_chart(doc)}"
        "<h2>Fixes</h2><table><tr><th>fix</th><th>mode</th><th>applied</th><th>verified</th>"
        f"<th>gain alone</th><th>why</th></tr>{rows}</table>{details}{diff}"
        + (f"<h2>Warnings</h2><ul>{warn}</ul>" if warn else "")
        + "</body></html>\n"
    )
