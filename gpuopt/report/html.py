"""``--format html``: one self-contained page that opens offline.

Everything is inline: CSS, SVG plots drawn in Python (:mod:`gpuopt.report.svg`), and one small
script that sorts tables by reading cell text or ``data-sort`` attributes (it never evaluates
data). A Content-Security-Policy forbids every network load and every script but that one (by
its hash), so even a mistake in escaping could not run code from a profile. Every string from
the document goes through :func:`esc` (``html.escape(quote=True)``) and every attribute value is
double-quoted; site links are built from ``cwd`` + site and percent-encoded
(:func:`gpuopt.report.sites.site_links`).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpuopt import __version__
from gpuopt.model.records import given
from gpuopt.report import headline as h
from gpuopt.report import utilization as u
from gpuopt.report.findings import (
    SEVERITY_ORDER,
    Footnotes,
    evidence_numbers,
    evidence_summary,
    no_findings_message,
    ordered_findings,
)
from gpuopt.report.renderer import Renderer
from gpuopt.report.sections import Cell, Section, detail_sections
from gpuopt.report.sites import site_links
from gpuopt.report.svg import COLORS, esc, hbar, line_chart, rank_bars, step_chart
from gpuopt.units import (
    MISSING,
    byte_unit,
    fmt_count,
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
    from gpuopt.report.utilization import TimelineView

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

_CSS = (
    "\n"
    ":root { --bg:#fbfbfc; --fg:#1d2330; --muted:#5f6775; --card:#fff; --line:#e3e6eb; "
    "--accent:#3b6fd8;\n"
    "  --high:#d64545; --medium:#e08a00; --low:#3d8fb8; --ok:#2a9d5c; }\n"
    "@media (prefers-color-scheme: dark) { :root { --bg:#15181e; --fg:#e6e9ef; "
    "--muted:#9aa3b2; --card:#1d2129;\n"
    "  --line:#2d333d; --accent:#7aa2f7; } }\n"
    "* { box-sizing: border-box; }\n"
    "body { margin:0; background:var(--bg); color:var(--fg);\n"
    '  font:14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }\n'
    "main { max-width:1180px; margin:0 auto; padding:24px 28px 48px; }\n"
    "h1 { font-size:22px; margin:0 0 4px; word-break:break-word; }\n"
    "h1 code { font-size:21px; }\n"
    "h2 { font-size:17px; margin:30px 0 10px; padding-bottom:4px; border-bottom:1px "
    "solid var(--line); }\n"
    "h3 { font-size:15px; margin:0; }\n"
    ".muted { color:var(--muted); }\n"
    ".badge { display:inline-block; padding:2px 9px; border-radius:10px; font-size:12px; "
    "font-weight:700;\n"
    "  color:#fff; vertical-align:middle; margin-left:8px; text-transform:uppercase; }\n"
    ".badge.ok { background:var(--ok); } .badge.error { background:var(--high); } "
    ".badge.interrupted { background:var(--medium); }\n"
    "dl.facts { display:grid; grid-template-columns:max-content 1fr; gap:3px 16px; "
    "margin:12px 0 0; }\n"
    "dl.facts dt { color:var(--muted); } dl.facts dd { margin:0; word-break:break-word; "
    "}\n"
    ".error-box { margin:14px 0 0; padding:10px 14px; border-left:4px solid var(--high); "
    "background:rgba(214,69,69,.08);\n"
    "  border-radius:4px; word-break:break-word; }\n"
    ".note-box { margin:14px 0 0; padding:10px 14px; border-left:4px solid "
    "var(--medium); background:rgba(224,138,0,.08); border-radius:4px; }\n"
    ".tiles { display:flex; gap:12px; flex-wrap:wrap; }\n"
    ".tile { background:var(--card); border:1px solid var(--line); border-radius:8px; "
    "padding:10px 16px; min-width:130px; }\n"
    ".tile .v { font-size:22px; font-weight:650; font-variant-numeric:tabular-nums; }\n"
    ".tile .k { color:var(--muted); font-size:12px; text-transform:uppercase; "
    "letter-spacing:.04em; }\n"
    ".chart { display:block; max-width:100%; height:auto; color:var(--fg); }\n"
    ".chartbox { background:var(--card); border:1px solid var(--line); "
    "border-radius:8px; padding:12px; margin:8px 0; }\n"
    ".legend { display:flex; gap:16px; flex-wrap:wrap; margin:8px 0 0; font-size:13px; }\n"
    '.legend span::before { content:""; display:inline-block; width:11px; height:11px; '
    "border-radius:2px;\n"
    "  margin-right:6px; vertical-align:-1px; background:var(--sw); }\n"
    ".finding { background:var(--card); border:1px solid var(--line); border-left:5px "
    "solid var(--low);\n"
    "  border-radius:8px; padding:12px 16px; margin:10px 0; }\n"
    ".finding.sev-high { border-left-color:var(--high); } .finding.sev-medium { "
    "border-left-color:var(--medium); }\n"
    ".finding header { display:flex; align-items:baseline; gap:10px; flex-wrap:wrap; }\n"
    ".finding .rank { font-weight:700; color:var(--muted); }\n"
    ".finding .sev { font-size:11px; font-weight:700; text-transform:uppercase; "
    "padding:1px 7px; border-radius:8px; color:#fff; background:var(--low); }\n"
    ".finding.sev-high .sev { background:var(--high); } .finding.sev-medium .sev { "
    "background:var(--medium); }\n"
    ".finding .est { margin-left:auto; font-weight:650; white-space:nowrap; cursor:help; "
    "border-bottom:1px dotted var(--muted); }\n"
    ".finding .meta { color:var(--muted); margin:4px 0 6px; word-break:break-word; }\n"
    ".finding p { margin:6px 0; word-break:break-word; }\n"
    "dl.evidence { display:grid; grid-template-columns:max-content 1fr; gap:1px 14px; "
    "margin:6px 0; font-size:13px; }\n"
    "dl.evidence dt { color:var(--muted); word-break:break-word; } dl.evidence dd { "
    "margin:0; font-variant-numeric:tabular-nums; word-break:break-word; }\n"
    ".fix { margin-top:8px; } .fix b { color:var(--ok); }\n"
    "pre { margin:4px 0 0; padding:8px 10px; background:rgba(127,127,127,.1); "
    "border-radius:6px;\n"
    "  white-space:pre-wrap; word-break:break-word; font:12.5px/1.45 ui-monospace, "
    "SFMono-Regular, Menlo, Consolas, monospace; }\n"
    "code { font:12.5px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }\n"
    "a { color:var(--accent); }\n"
    "a.file { margin-left:4px; font-size:12px; text-decoration:none; white-space:nowrap; }\n"
    ".tablewrap { overflow-x:auto; background:var(--card); border:1px solid var(--line); "
    "border-radius:8px; margin:8px 0 4px; }\n"
    "table { border-collapse:collapse; width:100%; font-size:13px; }\n"
    "th, td { padding:5px 10px; text-align:left; border-bottom:1px solid var(--line); "
    "vertical-align:top; word-break:normal; overflow-wrap:normal; }\n"
    "td.site, td.long { overflow-wrap:anywhere; min-width:14ch; }\n"
    "th { font-weight:600; color:var(--muted); background:rgba(127,127,127,.06); }\n"
    "td.num { white-space:nowrap; }\n"
    ".tablewrap.narrow { display:table; min-width:min(460px, 100%); } .tablewrap.narrow "
    "table { width:auto; min-width:100%; }\n"
    "table.sortable th { cursor:pointer; user-select:none; }\n"
    'table.sortable th::after { content:"\\00a0↕"; opacity:.35; font-size:11px; }\n'
    'th[aria-sort="ascending"]::after { content:"\\00a0▲"; opacity:.8; } '
    'th[aria-sort="descending"]::after { content:"\\00a0▼"; opacity:.8; }\n'
    "td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }\n"
    "tr:last-child td { border-bottom:none; }\n"
    ".tablenote { color:var(--muted); font-size:12.5px; margin:2px 0 12px; }\n"
    "ol.notes { color:var(--muted); font-size:12.5px; padding-left:22px; }\n"
    "ul.warnings li { margin:3px 0; word-break:break-word; }\n"
    "footer { margin-top:36px; color:var(--muted); font-size:12px; }\n"
)


_STEP_LEGEND = [
    ("data_wait", "data wait"),
    ("h2d", "host→device copies"),
    ("sync", "syncs"),
    ("rest", "compute + other"),
]
_MEMORY_NAMES = {"rss_bytes": "host RSS", "gpu_memory_bytes": "GPU memory"}


def _site_html(site: str | None, cwd: str | None) -> str:
    """A site as a VS Code link plus a ``file://`` link, or as plain text where no absolute path
    can be built honestly."""
    shown = one_line(site)
    if not shown:
        return ""
    links = site_links(shown, cwd)
    if links is None:
        return f'<code class="site">{esc(shown)}</code>'
    return (
        f'<a class="site" href="{esc(links.vscode)}" '
        f'title="open in VS Code: {esc(links.path)}:{links.line}">'
        f"<code>{esc(shown)}</code></a>"
        f'<a class="file" href="{esc(links.file)}" '
        f'title="open {esc(links.path)} in the browser">file ↗</a>'
    )


def _tile(key: str, value: str, extra: str = "") -> str:
    """A stat tile: a small label over a big value (both already escaped)."""
    return f'<div class="tile"><div class="k">{key}</div><div class="v">{value}</div>{extra}</div>'


def _chartbox(content: str) -> str:
    return f'<div class="chartbox">{content}</div>'


def _section(section_id: str, parts: list[str]) -> str:
    return "\n".join([f'<section id="{section_id}">', *parts, "</section>"])


def _legend(items: list[tuple[str, str]]) -> str:
    return (
        '<div class="legend">'
        + "".join(f'<span style="--sw:{COLORS[k]}">{esc(label)}</span>' for k, label in items)
        + "</div>"
    )


class HtmlRenderer(Renderer):
    name = "html"

    def render(self, profile: Profile) -> str:
        script = one_line(profile.script) or "profile"
        return self.page(f"gpuopt report: {script}", self.body(profile))

    def render_many(self, profiles: Sequence[Profile]) -> str:
        """Several documents on one page, one after another (``gpuopt report A B``)."""
        bodies = [f'<article class="run">\n{self.body(p)}\n</article>' for p in profiles]
        scripts = ", ".join(one_line(p.script) or "profile" for p in profiles)
        return self.page(f"gpuopt report: {scripts}", "\n<hr>\n".join(bodies))

    def body(self, profile: Profile) -> str:
        return "\n".join(
            part
            for part in (
                self.header(profile),
                self.step_time(profile),
                self.breakdown(profile),
                self.utilization(profile),
                self.findings(profile),
                self.details(profile),
                self.warnings(profile),
                self.footer(profile),
            )
            if part
        )

    @staticmethod
    def page(title: str, body: str) -> str:
        return (
            "<!DOCTYPE html>\n"
            '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            '<meta name="referrer" content="no-referrer">\n'
            f"<title>{esc(title)}</title>\n"
            f"<style>{_CSS}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n"
            f"<script>{_SORT_SCRIPT}</script>\n</body>\n</html>\n"
        )

    # --- sections -------------------------------------------------------------------------

    def header(self, profile: Profile) -> str:
        facts = h.header_facts(profile)
        status = profile.status
        badge = f'<span class="badge {esc(status)}">{esc(status)}</span>'
        trace = (
            ' <span class="muted" style="font-size:14px;font-weight:400">'
            "(from a profiler trace)</span>"
            if profile.source == "trace"
            else ""
        )
        rows = "".join(
            f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts if k not in ("script", "status")
        )
        out = [
            '<header id="summary">',
            f"<h1>gpuopt report: <code>{esc(dict(facts)['script'])}</code>{badge}{trace}</h1>",
            f'<dl class="facts">{rows}</dl>',
        ]
        err = h.error_line(profile)
        if err:
            failed = status == "error"
            cls, label = ("error-box", "Error") if failed else ("note-box", "Note")
            out.append(f'<div class="{cls}"><b>{label}:</b> {esc(err)}</div>')
        out.append("</header>")
        return "\n".join(out)

    def step_time(self, profile: Profile) -> str:
        out = ["<h2>Step time</h2>"]
        stats = h.step_stats(profile)
        if all(v is None for _, v in stats):
            out.append(
                '<p class="muted">No measured steps: gpuopt counts a step at each '
                "<code>optimizer.step()</code>, without an optimizer at each "
                "<code>loss.backward()</code>; elsewhere add <code>import gpuopt</code> and call "
                "<code>gpuopt.step()</code> once per step.</p>"
            )
            return _section("step-time", out)
        tiles = "".join(_tile(esc(label), esc(fmt_duration(v))) for label, v in stats)
        steps = _tile("steps", esc(fmt_count(profile.steps.measured)))
        out.append(f'<div class="tiles">{tiles}{steps}</div>')
        series = h.step_series(profile)
        if series:
            out.append('<h3 style="margin-top:18px">Each step, by cause</h3>')
            out.append(_chartbox(step_chart(series) + _legend(_STEP_LEGEND)))
            n_warm = sum(1 for r in series if r.warmup)
            note = "Hover a bar for its numbers."
            if n_warm:
                note += (
                    f" The first {n_warm} step(s) are warm-up (shaded, left out of the "
                    "statistics); ▲ marks a bar cut at the top of the scale."
                )
            out.append(f'<p class="tablenote">{esc(note)}</p>')
        return _section("step-time", out)

    def breakdown(self, profile: Profile) -> str:
        out = ["<h2>Where step time goes</h2>"]
        items = h.breakdown_items(profile.breakdown)
        if not items:
            out.append('<p class="muted">No breakdown: no measured steps.</p>')
            return _section("breakdown", out)
        legend = (
            '<div class="legend">'
            + "".join(
                f'<span style="--sw:{COLORS[k]}">{esc(label)} <b>{esc(fmt_frac(f))}</b></span>'
                for k, label, f in items
            )
            + "</div>"
        )
        out.append(_chartbox(hbar(items, label="share of measured step time by cause") + legend))
        rows = [
            (
                f"rank {e.rank}",
                num(given(e.step_time_median_s)),
                h.breakdown_items(e.breakdown),
            )
            for e in sorted(profile.ranks or [], key=lambda e: e.rank)
        ]
        chart = rank_bars(rows)
        if chart:
            out.append('<h3 style="margin-top:18px">Per rank (bar length: step median)</h3>')
            out.append(_chartbox(chart))
        return _section("breakdown", out)

    def utilization(self, profile: Profile) -> str:
        """Mean/max tiles, the CPU and GPU lines over time, the memory lines, and a note on
        what was not measured."""
        out = ["<h2>Utilization over time</h2>"]
        tl = u.timeline(profile)
        note = u.utilization_note(profile)
        tiles = _utilization_tiles(profile)
        if tiles:
            out.append(f'<div class="tiles">{tiles}</div>')
        out += _utilization_chart(profile, tl) + _memory_chart(tl)
        if note:
            out.append(f'<p class="tablenote">{esc(note)}</p>')
        elif not u.gpu_utilization_measured(profile):
            out.append('<p class="tablenote">GPU utilization was not measured in this run.</p>')
        if tl is None and not tiles and not note:
            out.append('<p class="muted">No utilization samples.</p>')
        return _section("utilization", out)

    def findings(self, profile: Profile) -> str:
        findings = ordered_findings(profile)
        out = [
            '<h2>Findings <span class="muted" style="font-weight:400;font-size:13px">'
            "ranked by estimated gain</span></h2>",
        ]
        if not findings:
            out.append(f'<p class="muted">{esc(no_findings_message(profile))}</p>')
            return _section("findings", out)
        notes = Footnotes()
        cwd = given(profile.cwd)
        out += [_finding_card(i, f, notes, cwd) for i, f in enumerate(findings, 1)]
        if notes.models:
            out.append(
                '<p class="tablenote">est. = estimated, not measured. '
                "How each estimate was made:</p>"
            )
            out.append(
                '<ol class="notes">' + "".join(f"<li>{esc(m)}</li>" for m in notes.models) + "</ol>"
            )
        return _section("findings", out)

    def details(self, profile: Profile) -> str:
        sections = detail_sections(profile)
        if not sections:
            return ""
        cwd = given(profile.cwd)
        out = ["<h2>Details</h2>"]
        for s in sections:
            out += _table_html(s, cwd)
        return _section("details", out)

    def warnings(self, profile: Profile) -> str:
        warnings = h.warnings_list(profile)
        if not warnings:
            return ""
        items = "".join(f"<li>{esc(w)}</li>" for w in warnings)
        return (
            f'<section id="warnings"><h2>Warnings</h2><ul class="warnings">{items}</ul></section>'
        )

    def footer(self, profile: Profile) -> str:
        schema = one_line(profile.schema) or MISSING
        cost = h.overhead_line(profile)
        own = f"{esc(cost)} · " if cost else ""
        return (
            f"<footer>{own}gpuopt {esc(__version__)} · document schema {esc(schema)} · "
            "all numbers are measured unless marked est. (estimate) · "
            "this page loads nothing from the network</footer>"
        )


def _utilization_tiles(profile: Profile) -> str:
    """``CPU mean / max`` and ``GPU mean / max`` tiles, where measured."""
    tiles = []
    for key in ("cpu", "gpu"):
        mean, mx = u.utilization_summary(profile, key)
        if mean is None and mx is None:
            continue
        cores = u.cpu_cores_note(profile) if key == "cpu" else ""
        extra = f'<div class="k" style="text-transform:none">{esc(cores)}</div>' if cores else ""
        value = f"{esc(fmt_util(mean))} / {esc(fmt_util(mx))}"
        tiles.append(_tile(f"{key.upper()} mean / max", value, extra))
    return "".join(tiles)


def _utilization_chart(profile: Profile, tl: TimelineView | None) -> list[str]:
    """CPU and GPU percent over time, with how they were sampled."""
    if tl is None or not tl.series:
        return []
    lines: list[tuple[str, str, Sequence[float | None]]] = [
        (k, k.upper(), tl.series[k]) for k in ("cpu", "gpu") if k in tl.series
    ]
    chart = line_chart(
        tl.t_s, lines, 100.0, lambda v: f"{v:.0f}%", "CPU and GPU utilization over time"
    )
    if not chart:
        return []
    sampling = u.sampling_note(profile, tl)
    caption = (
        f'<p class="tablenote">{esc(sampling)}; '
        "CPU is the process tree's share of all usable cores.</p>"
        if sampling
        else ""
    )
    return [_chartbox(chart) + caption]


def _memory_chart(tl: TimelineView | None) -> list[str]:
    """Host RSS and GPU memory over time, the axis in the binary unit of the peak."""
    if tl is None or not tl.memory:
        return []
    mem_lines = [(k, _MEMORY_NAMES[k], tl.memory[k]) for k in _MEMORY_NAMES if k in tl.memory]
    peak = max(v for _, _, vals in mem_lines for v in vals if v is not None)
    # ticks at round numbers of the unit the peak is shown in (8 GiB, not 8.59 GB)
    unit, unit_name = byte_unit(peak)
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
    return [_chartbox(chart)] if chart else []


def _estimate_html(f: Finding, notes: Footnotes) -> str:
    """``est. 1.25×`` with the model as hover text and a footnote number; "" without one."""
    if num(f.est_speedup) is None:
        return ""
    model = one_line(f.estimate_model)
    ref = notes.ref(model)
    tip = (
        f"estimate, not measured. Model: {model}"
        if model
        else "estimate, not measured (no model given)"
    )
    sup = f"<sup>[{ref}]</sup>" if ref else ""
    return f'<span class="est" title="{esc(tip)}">{esc(fmt_speedup(f.est_speedup))}{sup}</span>'


def _finding_card(i: int, f: Finding, notes: Footnotes, cwd: str | None) -> str:
    """One finding: severity, title, estimate, id and site, evidence and the fix."""
    sev = one_line(f.severity)
    sev_class = sev if sev in SEVERITY_ORDER else "low"
    est = _estimate_html(f, notes)
    meta = [f"<code>{esc(one_line(f.id))}</code>"]
    if f.site:
        meta.append("at " + _site_html(f.site, cwd))
    title = esc(one_line(f.title) or one_line(f.id))
    parts = [
        f'<article class="finding sev-{sev_class}" id="finding-{i}">',
        f'<header><span class="rank">{i}</span><span class="sev">{esc(sev or MISSING)}</span>'
        f"<h3>{title}</h3>{est}</header>",
        f'<div class="meta">{" · ".join(meta)}</div>',
    ]
    summary = evidence_summary(f)
    if summary:
        parts.append(f"<p>{esc(summary)}</p>")
    numbers = evidence_numbers(f)
    if numbers:
        parts.append(
            '<dl class="evidence">'
            + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in numbers)
            + "</dl>"
        )
    fix = text(f.fix).strip()
    if fix:
        parts.append(f'<div class="fix"><b>Fix</b><pre>{esc(fix)}</pre></div>')
    parts.append("</article>")
    return "\n".join(parts)


# A word this long (a path, a kernel's name) may break anywhere in a table cell: the others
# break between words only, and a table too wide for the page scrolls sideways.
_LONG_WORD = 30


def _cell_class(cell: Cell, numeric: bool) -> str:
    if numeric:
        return "num"
    if cell.site:
        return "site"
    return "long" if any(len(w) > _LONG_WORD for w in cell.text.split()) else ""


def _cell_html(cell: Cell, numeric: bool, cwd: str | None) -> str:
    """A table cell: numbers right-aligned with their value to sort by, sites as links."""
    name = _cell_class(cell, numeric)
    cls = f' class="{name}"' if name else ""
    sort = (
        f' data-sort="{esc(cell.sort)}"'
        if isinstance(cell.sort, (int, float)) and not isinstance(cell.sort, bool)
        else ""
    )
    content = _site_html(cell.site, cwd) if cell.site else esc(cell.text)
    return f"<td{cls}{sort}>{content}</td>"


def _table_html(s: Section, cwd: str | None) -> list[str]:
    """A detail section: its heading, a sortable table, and its note."""
    num_cls = ' class="num"'
    head = "".join(
        f'<th scope="col"{num_cls if j in s.numeric_columns else ""}>{esc(col)}</th>'
        for j, col in enumerate(s.columns)
    )
    rows = "".join(
        "<tr>"
        + "".join(_cell_html(cell, j in s.numeric_columns, cwd) for j, cell in enumerate(row))
        + "</tr>"
        for row in s.rows
    )
    wrap = "tablewrap narrow" if len(s.columns) <= 3 else "tablewrap"
    out = [
        f'<h3 id="{esc(s.id)}" style="margin-top:16px">{esc(s.title)}</h3>',
        f'<div class="{wrap}"><table class="sortable"><thead><tr>{head}</tr></thead>'
        f"<tbody>{rows}</tbody></table></div>",
    ]
    if s.note:
        out.append(f'<p class="tablenote">{esc(s.note)}</p>')
    return out
