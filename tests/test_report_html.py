"""``--format html``: one self-contained, offline page; every string escaped; plots as SVG."""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from msgspec.structs import replace
from report_fixtures import NAMES, fixture, minimal_doc

from gpuopt.model.document import empty_profile
from gpuopt.model.profile import Loop, Profile
from gpuopt.report.headline import StepSplit
from gpuopt.report.html import _SORT_SCRIPT, HtmlRenderer
from gpuopt.report.svg import line_chart, nice_ticks, step_bars


class Page(HTMLParser):
    """Every start tag (name, attributes, raw text) and the text of every <script>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None], str]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs), self.get_starttag_text() or ""))
        if tag == "script":
            self._in_script = True
            self.scripts.append("")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs), self.get_starttag_text() or ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data


def page(doc: Profile) -> tuple[str, Page]:
    out = HtmlRenderer().render(doc)
    p = Page()
    p.feed(out)
    p.close()
    return out, p


@pytest.mark.parametrize("name", NAMES)
def test_self_contained_and_safe(name: str) -> None:
    out, p = page(fixture(name))
    assert out.startswith("<!DOCTYPE html>")
    assert "http://" not in out and "https://" not in out
    for bad in ("<link", "<img", "<iframe", "<object", "<embed", "@import", "url("):
        assert bad not in out.lower()
    assert p.scripts == [_SORT_SCRIPT], "exactly one script: the table sorter"
    for tag, attrs, raw in p.tags:
        assert "src" not in attrs, raw
        assert not any(a.startswith("on") for a in attrs), raw
        outside_quotes = re.sub(r'"[^"]*"', '""', raw)
        assert "'" not in outside_quotes and not re.search(r"=(?!\")", outside_quotes), (
            f"unquoted attribute in {raw}"
        )
        if tag == "a":
            assert (attrs.get("href") or "").startswith(("vscode://file/", "file:///")), raw
    # the CSP allows that one script by its hash and nothing from the network
    csp = next(
        a["content"]
        for t, a, _ in p.tags
        if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"
    )
    digest = base64.b64encode(hashlib.sha256(_SORT_SCRIPT.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in (csp or "") and "default-src 'none'" in (csp or "")


def test_hostile_strings_are_escaped() -> None:
    out, p = page(fixture("hostile"))
    assert "<script>alert" not in out and "<b>bold" not in out and "</div><script>" not in out
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in out
    assert 'onmouseover="alert' not in out
    assert [t for t, _, _ in p.tags].count("script") == 1
    # the title survives as text, exactly
    titles = re.findall(r"<h3>(.*?)</h3>", out)
    assert (
        "Title &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; "
        "&amp; &lt;b&gt;bold&lt;/b&gt; | pipe" in titles
    )
    # a site with quotes and angle brackets becomes a percent-encoded link, text escaped
    hrefs = [a["href"] for t, a, _ in p.tags if t == "a"]
    assert (
        "vscode://file/home/ml/we%20ird%20%22dir%22/%3Cx%3E%26y/data/%3Cscript%3Ealert%28%22x%22%29%3C/script%3E.py:12:1"
        in hrefs
    )
    assert not any(h and h.startswith("javascript") for h in hrefs)
    assert "ünïcødé 训练.py" in out


def test_sites_are_clickable() -> None:
    out, p = page(fixture("host_culprits"))
    hrefs = [a.get("href") for t, a, _ in p.tags if t == "a"]
    assert "vscode://file/home/ml/projects/segmenter/seg/masks.py:45:1" in hrefs
    assert "file:///home/ml/projects/segmenter/seg/masks.py" in hrefs
    # the trace document has no cwd and no sites: no links, no crash
    _, tp = page(fixture("trace_tables"))
    assert not [t for t, _, _ in tp.tags if t == "a"]


def test_charts() -> None:
    doc = fixture("host_culprits")
    out, p = page(doc)
    step_svg = out[out.index('aria-label="step time per step, stacked by cause"') :]
    step_svg = step_svg[: step_svg.index("</svg>")]
    groups = re.findall(r'<g opacity="([0-9.]+)"><title>(step \d+)[^<]*</title>', step_svg)
    assert len(groups) == len(doc.steps.series) == 64
    assert [g for g in groups if g[0] == "0.45"] == [
        ("0.45", f"step {i}") for i in range(3)
    ]  # warm-up
    assert "warm-up" in step_svg
    util_svg = out[out.index('aria-label="CPU and GPU utilization over time"') :]
    util_svg = util_svg[: util_svg.index("</svg>")]
    assert util_svg.count("<polyline") >= 2 and ">CPU<" in util_svg and ">GPU<" in util_svg
    assert ">100%<" in util_svg and "time since start (s)" in util_svg
    assert "sync 22.1%" not in out and "syncs 22.1%" in out  # breakdown bar labels
    cards = re.findall(r'<article class="finding sev-(\w+)" id="finding-(\d)">', out)
    assert cards == [("high", "1"), ("medium", "2"), ("medium", "3"), ("medium", "4"), ("low", "5")]
    est = re.findall(r'<span class="est" title="([^"]*)">est\. ([0-9.]+)×', out)
    assert est[0] == (
        "estimate, not measured. Model: Amdahl: 90% of the sync share removed",
        "1.25",
    )


def test_tables_sortable_with_numeric_keys() -> None:
    out, _ = page(fixture("host_culprits"))
    assert out.count('<table class="sortable">') >= 5
    copies = out[out.index('id="transfers"') :]
    copies = copies[: copies.index("</table>")]
    assert re.findall(r'<td class="num" data-sort="([0-9.]+)">([^<]+)</td>', copies)[:2] == [
        ("80.0", "80"),
        ("335544320.0", "320 MiB"),
    ]


def test_table_cells_break_between_words_and_only_long_paths_anywhere() -> None:
    """A cell's words are never cut ("SlowDatase t" in a narrow column): cells break between
    words, a too-wide table scrolls in its box, and only a site or a word over 30 characters (a
    path, a kernel's name) may break anywhere."""
    from gpuopt.report.html import _CSS, _table_html
    from gpuopt.report.section_types import Cell, Section

    rule = re.search(r"th, td \{([^}]*)\}", _CSS)
    assert rule is not None
    assert "word-break:normal" in rule.group(1) and "overflow-wrap:normal" in rule.group(1)
    assert "break-word" not in rule.group(1) and "anywhere" not in rule.group(1)
    assert re.search(r"td\.site, td\.long \{[^}]*overflow-wrap:anywhere", _CSS)
    assert re.search(r"\.tablewrap \{[^}]*overflow-x:auto", _CSS)
    long_name = "void_at_native_vectorized_elementwise_kernel_float"
    section = Section(
        id="t",
        title="t",
        columns=["loop", "dataset", "kernel", "batch"],
        rows=[[Cell("a.py:3", site="a.py:3"), Cell("SlowDataset"), Cell(long_name), Cell("16")]],
        numeric_columns={3},
    )
    html = "".join(_table_html(section, None))
    cells = re.findall(r"<td( class=\"(\w+)\")?[^>]*>", html)
    assert [c[1] for c in cells] == ["site", "", "long", "num"]


def test_ranks_chart_and_failed_run() -> None:
    out, _ = page(fixture("gpu_ranks"))
    ranks_svg = out[out.index('aria-label="step median and breakdown per rank"') :]
    assert re.findall(r">(rank \d)<", ranks_svg[: ranks_svg.index("</svg>")]) == [
        "rank 0",
        "rank 1",
        "rank 2",
        "rank 3",
    ]
    assert ">176 ms<" in ranks_svg
    out, _ = page(fixture("failed_run"))
    assert '<div class="error-box"><b>Error:</b> torch.OutOfMemoryError: CUDA out of memory.' in out
    assert "<svg" not in out


def test_degrades_on_missing_keys() -> None:
    for doc in (empty_profile(), minimal_doc()):
        out, p = page(doc)
        assert "No measured steps" in out and "No breakdown" in out and p.scripts == [_SORT_SCRIPT]


def test_svg_helpers() -> None:
    assert nice_ticks(0.0432, 4) == [0.0, 0.02, 0.04, 0.06]
    series = [
        StepSplit(
            index=i,
            time_s=0.1,
            data_wait_s=0.0,
            h2d_s=0.0,
            sync_s=0.0,
            rest_s=0.1,
            warmup=i < 2,
            start_s=None,
        )
        for i in range(5000)
    ]
    bars, per = step_bars(series)
    assert len(bars) <= 400 and per == 13 and bars[2].label == "steps 2–14 (mean)"
    svg = line_chart([0, 1, 2, 3, 4], [("cpu", "CPU", [10, 20, None, 30, 40])], 100, str, "x")
    assert svg.count("<polyline") == 2  # a gap where a sample is missing


def test_renderers_do_not_import_heavy_libraries() -> None:
    fixture_file = Path(__file__).parent / "data" / "report" / "host_culprits.json"
    load = f"from gpuopt.loading import load; doc = load({str(fixture_file)!r}); "
    code = (
        "import sys; from gpuopt.report import get_renderer; "
        + load
        + "[get_renderer(n).render(doc) for n in ('text', 'json', 'md', 'html')]; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'numpy', 'pandas'}))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"
    # the Markdown and JSON renderers do not even need rich
    code = (
        "import sys; from gpuopt.report import get_renderer; "
        + load
        + "[get_renderer(n).render(doc) for n in ('json', 'md', 'html')]; "
        "print('rich' in sys.modules)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False"


@pytest.mark.skipif(
    shutil.which("chromium") is None, reason="chromium not installed (apt-get install chromium)"
)
def test_chromium_runs_the_sort_script_under_the_csp(tmp_path: Path) -> None:
    html = tmp_path / "r.html"
    html.write_text(HtmlRenderer().render(fixture("host_culprits")), encoding="utf-8")
    res = subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            f"--user-data-dir={tempfile.mkdtemp(dir=tmp_path)}",
            "--dump-dom",
            html.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert '<th scope="col" tabindex="0">' in res.stdout, "the sort script did not run (CSP hash?)"


def test_loop_through_a_helper_names_and_links_the_helper() -> None:
    doc = fixture("host_culprits")
    doc.loops = [
        replace(doc.loops[0], through=["seg/util.py:12", "seg/util.py:20"]),
        Loop(site="seg/masks.py:60", ops_per_step=40, iterations_per_step=20),
    ]
    out, p = page(doc)
    hrefs = [a.get("href") for t, a, _ in p.tags if t == "a"]
    assert "vscode://file/home/ml/projects/segmenter/seg/util.py:12:1" in hrefs
    assert "ops issued in" in out and "loop body" in out
    from gpuopt.report.text import TextRenderer

    text = TextRenderer().render(doc)
    assert "ops issued in" in text and "seg/util.py:12" in text
