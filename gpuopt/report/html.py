"""``--format html``: one self-contained page that opens offline.

Everything is inline: CSS, SVG plots drawn in Python (:mod:`gpuopt.report.svg`), and one small
script that sorts tables by reading cell text or ``data-sort`` attributes (it never evaluates
data). A Content-Security-Policy forbids every network load and every script but that one (by
its hash), so even a mistake in escaping could not run code from a profile. Every string from
the document goes through :func:`esc` (``html.escape(quote=True)``) and every attribute value is
double-quoted; site links are built from ``cwd`` + site and percent-encoded
(:func:`gpuopt.report.common.site_links`).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from typing import Any

from gpuopt import __version__
from gpuopt.report import common as c
from gpuopt.report.base import Renderer
from gpuopt.report.sections import detail_sections, rank_steps
from gpuopt.report.svg import COLORS, esc, hbar, line_chart, rank_bars, step_chart

_SORT_SCRIPT = """(function () {
  function key(cell) {
    var v = cell.getAttribute("data-sort");
    if (v !== null && v !== "" && !isNaN(Number(v))) { return [0, Number(v)]; }
    return [1, (v !== null ? v : cell.textContent || "").toLowerCase()];
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    var heads = table.tHead ? table.tHead.rows[0].cells : [];
    Array.prototype.forEach.call(heads, function (th, col) {
      var dir = -1;
      function sortBy() {
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        dir = -dir;
        rows.sort(function (a, b) {
          var x = key(a.cells[col]), y = key(b.cells[col]);
          if (x[0] !== y[0]) { return x[0] - y[0]; }
          return (x[1] < y[1] ? -1 : x[1] > y[1] ? 1 : 0) * dir;
        });
        rows.forEach(function (r) { body.appendChild(r); });
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
      }
      th.tabIndex = 0;
      th.addEventListener("click", sortBy);
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(); }
      });
    });
  });
})();"""

_SCRIPT_HASH = base64.b64encode(hashlib.sha256(_SORT_SCRIPT.encode("utf-8")).digest()).decode(
    "ascii"
)
CSP = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
    f"script-src 'sha256-{_SCRIPT_HASH}'; base-uri 'none'; form-action 'none'"
)

_CSS = """
:root { --bg:#fbfbfc; --fg:#1d2330; --muted:#5f6775; --card:#fff; --line:#e3e6eb; --accent:#3b6fd8;
  --high:#d64545; --medium:#e08a00; --low:#3d8fb8; --ok:#2a9d5c; }
@media (prefers-color-scheme: dark) { :root { --bg:#15181e; --fg:#e6e9ef; --muted:#9aa3b2; --card:#1d2129;
  --line:#2d333d; --accent:#7aa2f7; } }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--fg);
  font:14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
main { max-width:1180px; margin:0 auto; padding:24px 28px 48px; }
h1 { font-size:22px; margin:0 0 4px; word-break:break-word; }
h1 code { font-size:21px; }
h2 { font-size:17px; margin:30px 0 10px; padding-bottom:4px; border-bottom:1px solid var(--line); }
h3 { font-size:15px; margin:0; }
.muted { color:var(--muted); }
.badge { display:inline-block; padding:2px 9px; border-radius:10px; font-size:12px; font-weight:700;
  color:#fff; vertical-align:middle; margin-left:8px; text-transform:uppercase; }
.badge.ok { background:var(--ok); } .badge.error { background:var(--high); } .badge.interrupted { background:var(--medium); }
dl.facts { display:grid; grid-template-columns:max-content 1fr; gap:3px 16px; margin:12px 0 0; }
dl.facts dt { color:var(--muted); } dl.facts dd { margin:0; word-break:break-word; }
.error-box { margin:14px 0 0; padding:10px 14px; border-left:4px solid var(--high); background:rgba(214,69,69,.08);
  border-radius:4px; word-break:break-word; }
.note-box { margin:14px 0 0; padding:10px 14px; border-left:4px solid var(--medium); background:rgba(224,138,0,.08); border-radius:4px; }
.tiles { display:flex; gap:12px; flex-wrap:wrap; }
.tile { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:10px 16px; min-width:130px; }
.tile .v { font-size:22px; font-weight:650; font-variant-numeric:tabular-nums; }
.tile .k { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.04em; }
.chart { display:block; max-width:100%; height:auto; color:var(--fg); }
.chartbox { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:12px; margin:8px 0; }
.legend { display:flex; gap:16px; flex-wrap:wrap; margin:8px 0 0; font-size:13px; }
.legend span::before { content:""; display:inline-block; width:11px; height:11px; border-radius:2px;
  margin-right:6px; vertical-align:-1px; background:var(--sw); }
.finding { background:var(--card); border:1px solid var(--line); border-left:5px solid var(--low);
  border-radius:8px; padding:12px 16px; margin:10px 0; }
.finding.sev-high { border-left-color:var(--high); } .finding.sev-medium { border-left-color:var(--medium); }
.finding header { display:flex; align-items:baseline; gap:10px; flex-wrap:wrap; }
.finding .rank { font-weight:700; color:var(--muted); }
.finding .sev { font-size:11px; font-weight:700; text-transform:uppercase; padding:1px 7px; border-radius:8px; color:#fff; background:var(--low); }
.finding.sev-high .sev { background:var(--high); } .finding.sev-medium .sev { background:var(--medium); }
.finding .est { margin-left:auto; font-weight:650; white-space:nowrap; cursor:help; border-bottom:1px dotted var(--muted); }
.finding .meta { color:var(--muted); margin:4px 0 6px; word-break:break-word; }
.finding p { margin:6px 0; word-break:break-word; }
dl.evidence { display:grid; grid-template-columns:max-content 1fr; gap:1px 14px; margin:6px 0; font-size:13px; }
dl.evidence dt { color:var(--muted); word-break:break-word; } dl.evidence dd { margin:0; font-variant-numeric:tabular-nums; word-break:break-word; }
.fix { margin-top:8px; } .fix b { color:var(--ok); }
pre { margin:4px 0 0; padding:8px 10px; background:rgba(127,127,127,.1); border-radius:6px;
  white-space:pre-wrap; word-break:break-word; font:12.5px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
code { font:12.5px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
a { color:var(--accent); }
a.file { margin-left:4px; font-size:12px; text-decoration:none; }
.tablewrap { overflow-x:auto; background:var(--card); border:1px solid var(--line); border-radius:8px; margin:8px 0 4px; }
table { border-collapse:collapse; width:100%; font-size:13px; }
th, td { padding:5px 10px; text-align:left; border-bottom:1px solid var(--line); vertical-align:top; word-break:break-word; }
th { font-weight:600; color:var(--muted); background:rgba(127,127,127,.06); }
td.num { white-space:nowrap; }
.tablewrap.narrow { display:table; min-width:min(460px, 100%); } .tablewrap.narrow table { width:auto; min-width:100%; }
table.sortable th { cursor:pointer; user-select:none; }
table.sortable th::after { content:"\\00a0↕"; opacity:.35; font-size:11px; }
th[aria-sort="ascending"]::after { content:"\\00a0▲"; opacity:.8; } th[aria-sort="descending"]::after { content:"\\00a0▼"; opacity:.8; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
tr:last-child td { border-bottom:none; }
.tablenote { color:var(--muted); font-size:12.5px; margin:2px 0 12px; }
ol.notes { color:var(--muted); font-size:12.5px; padding-left:22px; }
ul.warnings li { margin:3px 0; word-break:break-word; }
footer { margin-top:36px; color:var(--muted); font-size:12px; }
"""


def _site_html(site: Any, cwd: Any) -> str:
    """A site as a VS Code link plus a ``file://`` link, or as plain text where no absolute path
    can be built honestly."""
    text = c.one_line(site)
    if not text:
        return ""
    links = c.site_links(text, cwd)
    if links is None:
        return f'<code class="site">{esc(text)}</code>'
    return (
        f'<a class="site" href="{esc(links.vscode)}" title="open in VS Code: {esc(links.path)}:{links.line}">'
        f"<code>{esc(text)}</code></a>"
        f'<a class="file" href="{esc(links.file)}" title="open {esc(links.path)} in the browser">file ↗</a>'
    )


class HtmlRenderer(Renderer):
    name = "html"

    def render(self, doc: dict[str, Any]) -> str:
        script = c.one_line(doc.get("script")) or "profile"
        body = "\n".join(
            part
            for part in (
                self.header(doc),
                self.step_time(doc),
                self.breakdown(doc),
                self.utilization(doc),
                self.findings(doc),
                self.details(doc),
                self.warnings(doc),
                self.footer(doc),
            )
            if part
        )
        return (
            "<!DOCTYPE html>\n"
            '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            '<meta name="referrer" content="no-referrer">\n'
            f"<title>gpuopt report: {esc(script)}</title>\n"
            f"<style>{_CSS}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n"
            f"<script>{_SORT_SCRIPT}</script>\n</body>\n</html>\n"
        )

    # --- sections -------------------------------------------------------------------------

    def header(self, doc: dict[str, Any]) -> str:
        facts = c.header_facts(doc)
        d = dict(facts)
        status = c.one_line(doc.get("status")) or c.MISSING
        badge_class = status if status in ("ok", "error", "interrupted") else "interrupted"
        trace = (
            ' <span class="muted" style="font-size:14px;font-weight:400">(from a profiler trace)</span>'
            if doc.get("source") == "trace"
            else ""
        )
        rows = "".join(
            f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts if k not in ("script", "status")
        )
        out = [
            '<header id="summary">',
            f'<h1>gpuopt report: <code>{esc(d["script"])}</code><span class="badge {esc(badge_class)}">{esc(status)}</span>{trace}</h1>',
            f'<dl class="facts">{rows}</dl>',
        ]
        err = c.error_line(doc)
        if err:
            cls = "error-box" if doc.get("status") == "error" else "note-box"
            label = "Error" if doc.get("status") == "error" else "Note"
            out.append(f'<div class="{cls}"><b>{label}:</b> {esc(err)}</div>')
        out.append("</header>")
        return "\n".join(out)

    def step_time(self, doc: dict[str, Any]) -> str:
        out = ['<section id="step-time">', "<h2>Step time</h2>"]
        stats = c.step_stats(doc)
        if all(v is None for _, v in stats):
            out.append(
                '<p class="muted">No measured steps: gpuopt counts a step at each <code>optimizer.step()</code> or <code>gpuopt.step()</code>.</p>'
            )
            return "\n".join(out + ["</section>"])
        tiles = "".join(
            f'<div class="tile"><div class="k">{esc(label)}</div><div class="v">{esc(c.fmt_duration(v))}</div></div>'
            for label, v in stats
        )
        out.append(
            f'<div class="tiles">{tiles}<div class="tile"><div class="k">steps</div><div class="v">{esc(c.fmt_count(c.get(doc, "steps", "measured")))}</div></div></div>'
        )
        series = c.step_series(doc)
        if series:
            out.append('<h3 style="margin-top:18px">Each step, by cause</h3>')
            out.append(
                f'<div class="chartbox">{step_chart(series)}{self._legend([("data_wait", "data wait"), ("h2d", "host→device copies"), ("sync", "syncs"), ("rest", "compute + other")])}</div>'
            )
            n_warm = sum(1 for r in series if r["warmup"])
            note = "Hover a bar for its numbers."
            if n_warm:
                note += f" The first {n_warm} step(s) are warm-up (shaded, left out of the statistics); ▲ marks a bar cut at the top of the scale."
            out.append(f'<p class="tablenote">{esc(note)}</p>')
        return "\n".join(out + ["</section>"])

    @staticmethod
    def _legend(items: list[tuple[str, str]]) -> str:
        return (
            '<div class="legend">'
            + "".join(f'<span style="--sw:{COLORS[k]}">{esc(label)}</span>' for k, label in items)
            + "</div>"
        )

    def breakdown(self, doc: dict[str, Any]) -> str:
        out = ['<section id="breakdown">', "<h2>Where step time goes</h2>"]
        items = c.breakdown_items(doc)
        if not items:
            out.append('<p class="muted">No breakdown: no measured steps.</p>')
            return "\n".join(out + ["</section>"])
        legend = (
            '<div class="legend">'
            + "".join(
                f'<span style="--sw:{COLORS[k]}">{esc(label)} <b>{esc(c.fmt_frac(f))}</b></span>'
                for k, label, f in items
            )
            + "</div>"
        )
        out.append(
            f'<div class="chartbox">{hbar(items, label="share of measured step time by cause")}{legend}</div>'
        )
        ranks = [e for e in c.as_list(doc.get("ranks")) if isinstance(e, dict)]
        if ranks:
            rows = []
            for e in sorted(ranks, key=c.rank_key):
                median = c.num(rank_steps(e)[1])
                rows.append(
                    (
                        f"rank {c.text(e.get('rank'))}",
                        median,
                        c.breakdown_items({"breakdown": e.get("breakdown")}),
                    )
                )
            chart = rank_bars(rows)
            if chart:
                out.append('<h3 style="margin-top:18px">Per rank (bar length: step median)</h3>')
                out.append(f'<div class="chartbox">{chart}</div>')
        return "\n".join(out + ["</section>"])

    def utilization(self, doc: dict[str, Any]) -> str:
        out = ['<section id="utilization">', "<h2>Utilization over time</h2>"]
        tl = c.timeline(doc)
        note = c.utilization_note(doc)
        summary = []
        for key, label in (("cpu", "CPU"), ("gpu", "GPU")):
            mean, mx = c.utilization_summary(doc, key)
            if mean is not None or mx is not None:
                extra = c.cpu_cores_note(doc) if key == "cpu" else ""
                extra_html = (
                    f'<div class="k" style="text-transform:none">{esc(extra)}</div>'
                    if extra
                    else ""
                )
                summary.append(
                    f'<div class="tile"><div class="k">{label} mean / max</div><div class="v">{esc(c.fmt_util(mean))} / {esc(c.fmt_util(mx))}</div>{extra_html}</div>'
                )
        if summary:
            out.append(f'<div class="tiles">{"".join(summary)}</div>')
        if tl is not None and tl.series:
            lines: list[tuple[str, str, Sequence[float | None]]] = [
                (k, k.upper(), tl.series[k]) for k in ("cpu", "gpu") if k in tl.series
            ]
            chart = line_chart(
                tl.t_s, lines, 100.0, lambda v: f"{v:.0f}%", "CPU and GPU utilization over time"
            )
            if chart:
                sampling = c.sampling_note(doc, tl)
                caption = (
                    f'<p class="tablenote">{esc(sampling)}; CPU is the process tree\'s share of all usable cores.</p>'
                    if sampling
                    else ""
                )
                out.append(f'<div class="chartbox">{chart}</div>{caption}')
        if tl is not None and tl.memory:
            names = {"rss_bytes": "host RSS", "gpu_memory_bytes": "GPU memory"}
            mem_lines = [
                (k, names[k], tl.memory[k])
                for k in ("rss_bytes", "gpu_memory_bytes")
                if k in tl.memory
            ]
            peak = max(v for _, _, vals in mem_lines for v in vals if v is not None)
            # ticks at round numbers of the unit the peak is shown in (8 GiB, not 8.59 GB)
            unit_i = 0
            while peak >= 1024 ** (unit_i + 1) and unit_i < 4:
                unit_i += 1
            unit, unit_name = 1024**unit_i, ("B", "KiB", "MiB", "GiB", "TiB")[unit_i]
            scaled: list[tuple[str, str, Sequence[float | None]]] = [
                (k, n, [None if v is None else v / unit for v in vals]) for k, n, vals in mem_lines
            ]
            chart = line_chart(
                tl.t_s,
                scaled,
                peak / unit * 1.05,
                lambda v: "0" if v == 0 else f"{v:g} {unit_name}",
                "memory over time",
                height=180,
            )
            if chart:
                out.append(f'<div class="chartbox">{chart}</div>')
        if note:
            out.append(f'<p class="tablenote">{esc(note)}</p>')
        elif not c.gpu_utilization_measured(doc):
            out.append('<p class="tablenote">GPU utilization was not measured in this run.</p>')
        if tl is None and not summary and not note:
            out.append('<p class="muted">No utilization samples.</p>')
        return "\n".join(out + ["</section>"])

    def findings(self, doc: dict[str, Any]) -> str:
        findings = c.ordered_findings(doc)
        out = [
            '<section id="findings">',
            '<h2>Findings <span class="muted" style="font-weight:400;font-size:13px">ranked by estimated gain</span></h2>',
        ]
        if not findings:
            out.append(f'<p class="muted">{esc(c.no_findings_message(doc))}</p>')
            return "\n".join(out + ["</section>"])
        notes = c.Footnotes()
        cwd = doc.get("cwd")
        for i, f in enumerate(findings, 1):
            sev = c.one_line(f.get("severity"))
            sev_class = sev if sev in c.SEVERITY_ORDER else "low"
            est = ""
            if c.num(f.get("est_speedup")) is not None:
                model = c.one_line(f.get("estimate_model"))
                ref = notes.ref(model)
                tip = (
                    f"estimate, not measured. Model: {model}"
                    if model
                    else "estimate, not measured (no model given)"
                )
                sup = f"<sup>[{ref}]</sup>" if ref else ""
                est = f'<span class="est" title="{esc(tip)}">{esc(c.fmt_speedup(f.get("est_speedup")))}{sup}</span>'
            meta = [f"<code>{esc(c.one_line(f.get('id')))}</code>"]
            if f.get("site"):
                meta.append("at " + _site_html(f.get("site"), cwd))
            parts = [
                f'<article class="finding sev-{sev_class}" id="finding-{i}">',
                f'<header><span class="rank">{i}</span><span class="sev">{esc(sev or c.MISSING)}</span>'
                f"<h3>{esc(c.one_line(f.get('title')) or c.one_line(f.get('id')))}</h3>{est}</header>",
                f'<div class="meta">{" · ".join(meta)}</div>',
            ]
            summary = c.evidence_summary(f)
            if summary:
                parts.append(f"<p>{esc(summary)}</p>")
            numbers = c.evidence_numbers(f)
            if numbers:
                parts.append(
                    '<dl class="evidence">'
                    + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in numbers)
                    + "</dl>"
                )
            fix = c.text(f.get("fix")).strip()
            if fix:
                parts.append(f'<div class="fix"><b>Fix</b><pre>{esc(fix)}</pre></div>')
            parts.append("</article>")
            out.append("\n".join(parts))
        if notes.models:
            out.append(
                '<p class="tablenote">est. = estimated, not measured. How each estimate was made:</p>'
            )
            out.append(
                '<ol class="notes">' + "".join(f"<li>{esc(m)}</li>" for m in notes.models) + "</ol>"
            )
        return "\n".join(out + ["</section>"])

    def details(self, doc: dict[str, Any]) -> str:
        sections = detail_sections(doc)
        if not sections:
            return ""
        cwd = doc.get("cwd")
        out = ['<section id="details">', "<h2>Details</h2>"]
        for s in sections:
            out.append(f'<h3 id="{esc(s.id)}" style="margin-top:16px">{esc(s.title)}</h3>')
            num_cls = ' class="num"'
            head = "".join(
                f'<th scope="col"{num_cls if j in s.numeric_columns else ""}>{esc(col)}</th>'
                for j, col in enumerate(s.columns)
            )
            rows = []
            for row in s.rows:
                cells = []
                for j, cell in enumerate(row):
                    cls = ' class="num"' if j in s.numeric_columns else ""
                    sort = (
                        f' data-sort="{esc(cell.sort)}"'
                        if isinstance(cell.sort, (int, float)) and not isinstance(cell.sort, bool)
                        else ""
                    )
                    content = _site_html(cell.site, cwd) if cell.site else esc(cell.text)
                    cells.append(f"<td{cls}{sort}>{content}</td>")
                rows.append("<tr>" + "".join(cells) + "</tr>")
            wrap = "tablewrap narrow" if len(s.columns) <= 3 else "tablewrap"
            out.append(
                f'<div class="{wrap}"><table class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
            )
            if s.note:
                out.append(f'<p class="tablenote">{esc(s.note)}</p>')
        return "\n".join(out + ["</section>"])

    def warnings(self, doc: dict[str, Any]) -> str:
        warnings = c.warnings_list(doc)
        if not warnings:
            return ""
        items = "".join(f"<li>{esc(w)}</li>" for w in warnings)
        return (
            f'<section id="warnings"><h2>Warnings</h2><ul class="warnings">{items}</ul></section>'
        )

    def footer(self, doc: dict[str, Any]) -> str:
        schema = c.one_line(doc.get("schema")) or c.MISSING
        return (
            f"<footer>gpuopt {esc(__version__)} · document schema {esc(schema)} · "
            "all numbers are measured unless marked est. (estimate) · this page loads nothing from the network</footer>"
        )
