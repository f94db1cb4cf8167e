"""``--format md``: GitHub-flavoured Markdown; checked by rendering it with markdown-it (rich's
own Markdown parser, CommonMark + tables, raw HTML allowed as GitHub does)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from markdown_it import MarkdownIt
from report_fixtures import NAMES, fixture, minimal_doc

from gpuopt.model.document import empty_profile
from gpuopt.report.markdown import MarkdownRenderer, md


def to_html(text: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(text)


class Tables(HTMLParser):
    """Rows of every table in rendered HTML, as lists of cell texts; and every tag seen."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.tags: set[str] = set()
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def parse(text: str) -> Tables:
    p = Tables()
    p.feed(to_html(text))
    return p


def test_headline_tables() -> None:
    out = MarkdownRenderer().render(fixture("cpu_dataloader_bound"))
    assert out.startswith("## gpuopt: train\\_mnist.py — ok (exit code 0)\n")
    t = parse(out)
    stats = next(tb for tb in t.tables if tb[0] == ["median", "p10", "p90", "mean"])
    assert stats[1] == ["233 ms", "219 ms", "397 ms", "254 ms"]
    bd = next(tb for tb in t.tables if tb[0][:2] == ["part", "share of step time"])
    assert [row[:2] for row in bd[1:]] == [
        ["data wait", "67.6%"],
        ["host→device copies", "0.0%"],
        ["syncs", "1.2%"],
        ["compute", "29.1%"],
        ["other", "2.1%"],
    ]
    util = next(tb for tb in t.tables if tb[0][:3] == ["", "mean", "max"])
    assert util[1][:3] == ["CPU", "22% (≈1.7 of 8 cores busy)", "37%"]
    assert "no NVIDIA GPU/NVML: GPU utilization not measured" in out


def test_findings_table_ranked_with_estimates() -> None:
    out = MarkdownRenderer().render(fixture("host_culprits"))
    t = parse(out)
    findings = next(
        tb for tb in t.tables if tb[0] == ["#", "severity", "finding", "site", "est. speedup"]
    )
    assert [row[0] for row in findings[1:]] == ["1", "2", "3", "4", "5"]
    ids = [re.search(r"\(([a-z0-9-]+)\)", row[2]).group(1) for row in findings[1:]]  # type: ignore[union-attr]
    assert ids == ["sync-in-step", "launch-bound", "pageable-h2d", "loop-indexing", "blocking-h2d"]
    assert findings[1][3] == "seg/masks.py:45" and findings[1][4] == "est. 1.25× [1]"
    assert findings[2][3] == ""  # launch-bound has no site
    assert "[1] Amdahl: 90% of the sync share removed" in to_html(out).replace("\\", "")
    assert "fix:" in findings[1][2]


def test_detail_tables_in_details_blocks() -> None:
    out = MarkdownRenderer().render(fixture("cpu_dataloader_bound"))
    assert "<summary><b>Host-device syncs (per step)</b> (2 rows)</summary>" in out
    syncs = next(tb for tb in parse(out).tables if tb[0] == ["kind", "site", "count", "note"])
    assert syncs[1] == ["tolist", "metrics.py:18", "2", "would block on a GPU"]


def test_hostile_text_is_escaped() -> None:
    out = MarkdownRenderer().render(fixture("hostile"))
    html = to_html(out)
    t = parse(out)
    assert t.tags <= {
        "h2",
        "h3",
        "p",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "strong",
        "em",
        "br",
        "details",
        "summary",
        "b",
        "blockquote",
        "ul",
        "li",
    }
    assert (
        "<script" not in html
        and "<img" not in html
        and "onerror" not in re.sub(r"&[a-z]+;|[^<]*", "", html)
    )
    for tb in t.tables:
        assert len({len(row) for row in tb}) == 1, "a | in the data must not split a cell"
    findings = next(tb for tb in t.tables if tb[0] and tb[0][0] == "#")
    assert 'Title <script>alert("x")</script> & <b>bold</b> | pipe' in findings[1][2]
    generic = next(tb for tb in t.tables if tb[0] == ["<th>", "a|b", "ü"])
    assert generic[1] == ['<script>alert("x")</script>', "x | y", 'q"uote']
    assert generic[2] == ["1.5", "–", "&amp;"]
    assert "line1 line2 line3" in html


def test_md_escape() -> None:
    assert md("a|b") == "a\\|b"
    assert (
        md("<x> & *y* _z_ `c` [l](u) $m$ #h")
        == "&lt;x&gt; &amp; \\*y\\* \\_z\\_ \\`c\\` \\[l\\](u) \\$m\\$ \\#h"
    )
    assert md("two\nlines") == "two lines"


def test_failed_run() -> None:
    out = MarkdownRenderer().render(fixture("failed_run"))
    assert "> **Error:** torch.OutOfMemoryError: CUDA out of memory." in out
    assert "No measured steps" in out and "No breakdown: no measured steps." in out


@pytest.mark.parametrize("name", NAMES)
def test_every_fixture_renders_valid_tables(name: str) -> None:
    out = MarkdownRenderer().render(fixture(name))
    for tb in parse(out).tables:
        assert len({len(row) for row in tb}) == 1


def test_degrades_on_missing_keys() -> None:
    for doc in (empty_profile(), minimal_doc()):
        out = MarkdownRenderer().render(doc)
        assert "No measured steps" in out and "No utilization samples." in out
