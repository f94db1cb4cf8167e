"""Shared report helpers: number formatting, site links, ordering, tolerant reading."""

from __future__ import annotations

import math

import pytest

from gpuopt.report import common as c
from gpuopt.report.sections import detail_sections, rank_steps
from gpuopt.schema import empty_profile


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0.0412, "41.2 ms"),
        (0.23306, "233 ms"),
        (1.523, "1.52 s"),
        (13.49, "13.5 s"),
        (0.0000217, "21.7 µs"),
        (5e-8, "50.0 ns"),
        (125.0, "2 min 05 s"),
        (7300.0, "2 h 02 min"),
        (0, "0 s"),
        (None, c.MISSING),
        (float("nan"), c.MISSING),
        (float("inf"), c.MISSING),
        ("12", c.MISSING),
        (True, c.MISSING),
    ],
)
def test_fmt_duration(seconds: object, expected: str) -> None:
    assert c.fmt_duration(seconds) == expected


def test_number_formats() -> None:
    assert c.fmt_bytes(1572864) == "1.50 MiB"
    assert c.fmt_bytes(85899345920) == "80.0 GiB"
    assert c.fmt_bytes(512) == "512 B"
    assert c.fmt_bytes(None) == c.MISSING
    assert c.fmt_frac(0.4567) == "45.7%"
    assert c.fmt_frac(0.4567, 0) == "46%"
    assert c.fmt_pct(45.67) == "45.7%"
    assert c.fmt_count(2316) == "2,316"
    assert c.fmt_count(2.5) == "2.5"
    assert c.fmt_count(3.0) == "3"
    assert c.fmt_us(21.7) == "21.7 µs"
    assert c.fmt_speedup(1.2549) == "est. 1.25×"
    assert c.fmt_speedup(None) == c.MISSING
    assert c.fmt_scalar(150823.4) == "150,823"
    assert c.fmt_scalar(0.0932) == "0.0932"
    assert c.fmt_scalar(None) == c.MISSING
    assert c.fmt_scalar(math.nan) == c.MISSING
    assert c.fmt_scalar(True) == "yes"


def test_evidence_values_use_the_unit_in_their_name() -> None:
    assert c.fmt_evidence_value("data_wait_s_per_step", 0.1576) == "158 ms"
    assert c.fmt_evidence_value("bytes_per_step", 436207616) == "416 MiB"
    assert c.fmt_evidence_value("mean_op_us", 21.7) == "21.7 µs"
    assert c.fmt_evidence_value("idle_pct", 19.6) == "19.6%"
    assert c.fmt_evidence_value("sync_share", 0.221) == "22.1%"
    assert c.fmt_evidence_value("ops_per_step", 480) == "480"
    # a "share" outside [0, 1] is not a fraction: shown as it is, never as 4200%
    assert c.fmt_evidence_value("share", 42) == "42"
    assert (
        c.fmt_evidence_value("idle_by_cause_ms", {"sync": 18.81, "launch": 12283.4, "python": 0.0})
        == "launch 12.3 s, sync 18.8 ms, python 0 s"
    )


def test_site_links_are_absolute_and_percent_encoded() -> None:
    links = c.site_links("seg/masks.py:45", "/home/ml/proj")
    assert links is not None
    assert links.path == "/home/ml/proj/seg/masks.py"
    assert links.vscode == "vscode://file/home/ml/proj/seg/masks.py:45:1"
    assert links.file == "file:///home/ml/proj/seg/masks.py"
    hostile = c.site_links('a "b"/<x>&y #?.py:7', "/w d")
    assert hostile is not None
    assert hostile.vscode == "vscode://file/w%20d/a%20%22b%22/%3Cx%3E%26y%20%23%3F.py:7:1"
    for ch in ' "<>&#?':
        assert ch not in hostile.vscode and ch not in hostile.file
    assert c.site_links("../lib/x.py:3", "/a/b").path == "/a/lib/x.py"  # type: ignore[union-attr]
    assert c.site_links("/abs/x.py:3", None).path == "/abs/x.py"  # type: ignore[union-attr]
    win = c.site_links("src\\x.py:9", "C:\\Users\\me")
    assert win is not None and win.vscode == "vscode://file/C:/Users/me/src/x.py:9:1"
    # no link where it cannot be built honestly
    assert c.site_links("train.py:12", None) is None
    assert c.site_links("train.py", "/w") is None
    assert c.site_links("<stdin>:3", "/w") is None
    assert c.site_links(None, "/w") is None
    assert c.site_links("javascript:alert(1)//x.py:3", None) is None


def test_findings_are_ranked_by_estimated_gain_then_severity() -> None:
    doc = {
        "findings": [
            {"id": "b", "severity": "low", "est_speedup": 1.05},
            {"id": "a", "severity": "high", "est_speedup": None},
            {"id": "c", "severity": "medium", "est_speedup": 1.40},
            {"id": "d", "severity": "high", "est_speedup": 1.05},
            "not a finding",
            {"id": "e", "severity": "medium", "est_speedup": float("nan")},
        ]
    }
    assert [f["id"] for f in c.ordered_findings(doc)] == ["c", "d", "b", "a", "e"]


def test_step_series_rest_is_never_negative() -> None:
    doc = {
        "steps": {
            "series": [
                {
                    "index": 0,
                    "time_s": 0.1,
                    "data_wait_s": 0.03,
                    "h2d_s": 0.01,
                    "sync_s": 0.02,
                    "warmup": True,
                },
                {"index": 1, "time_s": 0.1, "data_wait_s": 0.2, "h2d_s": None, "sync_s": "x"},
                {"index": 2, "time_s": None},
                "junk",
            ]
        }
    }
    series = c.step_series(doc)
    assert [r["index"] for r in series] == [0, 1]
    assert series[0]["rest_s"] == pytest.approx(0.04)
    assert series[0]["warmup"] is True
    assert series[1]["rest_s"] == 0.0 and series[1]["h2d_s"] == 0.0


def test_timeline_aligns_series_and_drops_bad_samples() -> None:
    doc = {
        "utilization": {
            "timeline": {
                "t_s": [0.0, 0.1, None, 0.3],
                "cpu": [10, float("nan"), 30, 40],
                "gpu": None,
                "rss_bytes": [1, 2, 3],
            }
        }
    }
    tl = c.timeline(doc)
    assert tl is not None
    assert tl.t_s == [0.0, 0.1, 0.3]
    assert tl.series == {"cpu": [10.0, None, 40.0]}
    assert tl.memory == {"rss_bytes": [1.0, 2.0, None]}
    assert c.timeline({"utilization": {"timeline": None}}) is None
    assert c.resample([1.0, 3.0, None, None, 5.0, 7.0], 3) == [2.0, None, 6.0]


def test_breakdown_empty_when_nothing_measured() -> None:
    assert c.breakdown_items(empty_profile()) == []
    items = c.breakdown_items({"breakdown": {"data_wait": 0.5, "compute": 0.5}})
    assert [k for k, _, _ in items] == ["data_wait", "h2d", "sync", "compute", "other"]
    assert [f for _, _, f in items] == [0.5, 0.0, 0.0, 0.5, 0.0]


def test_rank_entries_of_runner_and_trace_are_both_read() -> None:
    assert rank_steps({"steps": 120, "step_time_median_s": 0.148}) == (120, 0.148)
    assert rank_steps({"steps": 5, "step_time_s_median": 0.13}) == (5, 0.13)
    assert rank_steps({"steps": {"measured": 9, "time_s": {"median": 0.2}}}) == (9, 0.2)


def test_detail_sections_of_an_empty_profile() -> None:
    assert detail_sections(empty_profile()) == []


def test_printable_neutralises_terminal_control() -> None:
    assert c.printable("a\x1b[31mb\x07\r") == "a\\x1b[31mb\\x07\\x0d"
    assert c.printable("x\u202ey") == "x\\u202ey"
    assert c.printable("ünï 训练") == "ünï 训练"
