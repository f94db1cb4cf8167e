"""What every report format shares: number formatting, site links, findings order and evidence,
the headline facts and the generic key/value tables, read from typed documents."""

from __future__ import annotations

import json
import math

import pytest
from msgspec import UNSET
from msgspec.structs import replace
from report_fixtures import fixture

from gpuopt import units
from gpuopt.model.document import decode, empty_profile, encode
from gpuopt.model.profile import (
    Breakdown,
    Dispatch,
    Finding,
    Profile,
    StepRecord,
    Steps,
    Timeline,
    Utilization,
)
from gpuopt.model.records import given, set_fields
from gpuopt.model.trace import ProfilerWindowInfo, Straggler, TraceDetails
from gpuopt.report.findings import fmt_evidence_value, ordered_findings
from gpuopt.report.headline import breakdown_items, header_facts, step_series
from gpuopt.report.sections import detail_sections, dispatch_section, ranks_section, trace_section
from gpuopt.report.sites import site_links
from gpuopt.report.text import printable
from gpuopt.report.textcharts import resample
from gpuopt.report.utilization import timeline

MISSING = units.MISSING


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
        (179.6, "3 min 00 s"),  # rounded first, never "2 min 60 s"
        (3599.7, "1 h 00 min"),
        (7300.0, "2 h 02 min"),
        (0, "0 s"),
        (None, MISSING),
        (float("nan"), MISSING),
        (float("inf"), MISSING),
        ("12", MISSING),
        (True, MISSING),
        (UNSET, MISSING),
    ],
)
def test_fmt_duration(seconds: object, expected: str) -> None:
    assert units.fmt_duration(seconds) == expected


def test_number_formats() -> None:
    assert units.fmt_bytes(1572864) == "1.50 MiB"
    assert units.fmt_bytes(85899345920) == "80.0 GiB"
    assert units.fmt_bytes(512) == "512 B"
    assert units.fmt_bytes(None) == MISSING
    assert units.fmt_frac(0.4567) == "45.7%"
    assert units.fmt_frac(0.4567, 0) == "46%"
    assert units.fmt_pct(45.67) == "45.7%"
    assert units.fmt_count(2316) == "2,316"
    assert units.fmt_count(2.5) == "2.5"
    assert units.fmt_count(3.0) == "3"
    assert units.fmt_us(21.7) == "21.7 µs"
    assert units.fmt_speedup(1.2549) == "est. 1.25×"
    assert units.fmt_speedup(None) == MISSING
    assert units.fmt_scalar(150823.4) == "150,823"
    assert units.fmt_scalar(0.0932) == "0.0932"
    assert units.fmt_scalar(None) == MISSING
    assert units.fmt_scalar(math.nan) == MISSING
    assert units.fmt_scalar(True) == "yes"


def test_evidence_values_use_the_unit_in_their_name() -> None:
    assert fmt_evidence_value("data_wait_s_per_step", 0.1576) == "158 ms"
    assert fmt_evidence_value("bytes_per_step", 436207616) == "416 MiB"
    assert fmt_evidence_value("mean_op_us", 21.7) == "21.7 µs"
    assert fmt_evidence_value("idle_pct", 19.6) == "19.6%"
    assert fmt_evidence_value("sync_share", 0.221) == "22.1%"
    assert fmt_evidence_value("ops_per_step", 480) == "480"
    # a "share" outside [0, 1] is not a fraction: shown as it is, never as 4200%
    assert fmt_evidence_value("share", 42) == "42"
    assert (
        fmt_evidence_value("idle_by_cause_ms", {"sync": 18.81, "launch": 12283.4, "python": 0.0})
        == "launch 12.3 s, sync 18.8 ms, python 0 s"
    )
    # per-rank dicts (keyed by the rank as a string) say "rank"; the straggler's parts are seconds
    assert (
        fmt_evidence_value("own_work_s_per_step", {"0": 0.00203, "1": 0.0222})
        == "rank 1 22.2 ms, rank 0 2.03 ms"
    )
    assert fmt_evidence_value("extra_by_part", {"compute": 0.2703, "sync": 0.0}) == (
        "compute 270 ms, sync 0 s"
    )


def test_site_links_are_absolute_and_percent_encoded() -> None:
    links = site_links("seg/masks.py:45", "/home/ml/proj")
    assert links is not None
    assert links.path == "/home/ml/proj/seg/masks.py"
    assert links.vscode == "vscode://file/home/ml/proj/seg/masks.py:45:1"
    assert links.file == "file:///home/ml/proj/seg/masks.py"
    hostile = site_links('a "b"/<x>&y #?.py:7', "/w d")
    assert hostile is not None
    assert hostile.vscode == "vscode://file/w%20d/a%20%22b%22/%3Cx%3E%26y%20%23%3F.py:7:1"
    for ch in ' "<>&#?':
        assert ch not in hostile.vscode and ch not in hostile.file
    assert site_links("../lib/x.py:3", "/a/b").path == "/a/lib/x.py"  # type: ignore[union-attr]
    assert site_links("/abs/x.py:3", None).path == "/abs/x.py"  # type: ignore[union-attr]
    win = site_links("src\\x.py:9", "C:\\Users\\me")
    assert win is not None and win.vscode == "vscode://file/C:/Users/me/src/x.py:9:1"
    # no link where it cannot be built honestly
    assert site_links("train.py:12", None) is None
    assert site_links("train.py", "/w") is None
    assert site_links("<stdin>:3", "/w") is None
    assert site_links(None, "/w") is None
    assert site_links("javascript:alert(1)//x.py:3", None) is None
    assert site_links("x.py:3", "relative/dir") is None


def test_a_sites_file_and_line() -> None:
    from gpuopt.report.sites import split_site
    from gpuopt.units import site_line

    assert site_line("src/train.py:42") == ("src/train.py", 42)
    assert site_line("C:\\w\\x.py:9") == ("C:\\w\\x.py", 9)  # the last colon splits
    for lineless in ("train.py", ":3", "train.py:", "train.py:x", "<stdin>"):
        assert site_line(lineless) is None
        assert split_site(lineless) == (lineless, None)
    assert split_site("a/b.py:7") == ("a/b.py", 7) and split_site(None) == ("", None)


def _finding(fid: str, severity: str, est: float | None) -> Finding:
    return Finding(id=fid, severity=severity, title=fid, evidence={}, fix="", est_speedup=est)  # type: ignore[arg-type]


def test_findings_are_ranked_by_estimated_gain_then_severity() -> None:
    profile = Profile(
        findings=[
            _finding("b", "low", 1.05),
            _finding("a", "high", None),
            _finding("c", "medium", 1.40),
            _finding("d", "high", 1.05),
            _finding("e", "medium", float("nan")),  # a NaN estimate counts as no gain
        ]
    )
    assert [f.id for f in ordered_findings(profile)] == ["c", "d", "b", "a", "e"]


def test_step_series_rest_is_never_negative() -> None:
    steps = Steps(
        series=[
            StepRecord(
                index=0,
                start_s=0.0,
                time_s=0.1,
                warmup=True,
                data_wait_s=0.03,
                h2d_s=0.01,
                sync_s=0.02,
            ),
            StepRecord(index=1, start_s=None, time_s=0.1, data_wait_s=0.2),  # no h2d_s key
            StepRecord(index=2, start_s=0.2, time_s=math.nan),
            StepRecord(index=3, start_s=0.3, time_s=-1.0),
        ]
    )
    series = step_series(Profile(steps=steps))
    assert [r.index for r in series] == [0, 1]
    assert series[0].rest_s == pytest.approx(0.04)
    assert series[0].warmup is True
    assert series[1].rest_s == 0.0 and series[1].h2d_s == 0.0 and series[1].start_s is None


def test_timeline_aligns_series_and_drops_bad_samples() -> None:
    tl = Timeline(
        t_s=[0.0, 0.1, math.nan, 0.3], cpu=[10, math.nan, 30, 40], gpu=None, rss_bytes=[1, 2, 3]
    )
    view = timeline(Profile(utilization=Utilization(timeline=tl)))
    assert view is not None
    assert view.t_s == [0.0, 0.1, 0.3]
    assert view.series == {"cpu": [10.0, None, 40.0]}
    assert view.memory == {"rss_bytes": [1.0, 2.0, None]}
    assert timeline(Profile(utilization=Utilization(timeline=None))) is None
    assert timeline(Profile(utilization=Utilization(timeline=Timeline(t_s=[0.0])))) is None
    assert resample([1.0, 3.0, None, None, 5.0, 7.0], 3) == [2.0, None, 6.0]


def test_breakdown_empty_when_nothing_measured() -> None:
    assert breakdown_items(empty_profile().breakdown) == []
    assert breakdown_items(None) == []
    items = breakdown_items(Breakdown(data_wait=0.5, compute=0.5))
    assert [k for k, _, _ in items] == ["data_wait", "h2d", "sync", "compute", "other"]
    assert [f for _, _, f in items] == [0.5, 0.0, 0.0, 0.5, 0.0]


def test_header_leaves_out_what_the_document_does_not_have() -> None:
    profile = replace(empty_profile("train.py", ["train.py", "--lr", "1"]), wall_s=None)
    facts = dict(header_facts(profile))
    assert facts["wall time"] == MISSING and facts["argv"] == "train.py --lr 1"
    assert "cwd" not in facts and "started" not in facts
    facts = dict(header_facts(replace(profile, cwd="/w", started_at="2025-03-14T09:26:53")))
    assert facts["cwd"] == "/w" and facts["started"] == "2025-03-14T09:26:53"


def test_rank_median_read_from_the_current_and_the_old_name() -> None:
    doc = fixture("gpu_ranks")
    for old in (False, True):
        whole = json.loads(encode(empty_profile("t.py")))
        name = "step_time_s_median" if old else "step_time_median_s"
        whole["ranks"] = [{"rank": 0, "dir": "r0", "steps": 120, "breakdown": None, name: 0.148}]
        section = ranks_section(decode(json.dumps(whole), "ranks"))
        assert section is not None
        assert [c.text for c in section.rows[0]][:3] == ["0", "120", "148 ms"], old
    assert ranks_section(replace(doc, ranks=None)) is None


def test_given_and_set_fields() -> None:
    d = Dispatch(ops_per_step=3, mean_op_us_raw=None, note="n")
    assert given(d.note) == "n" and given(d.step_time_us) is None
    assert set_fields(d) == [
        ("ops_per_step", 3),
        ("mean_op_us", None),
        ("mean_op_us_raw", None),
        ("note", "n"),
    ]


def test_dispatch_rows_are_labelled_and_internal_fields_stay_in_json() -> None:
    """Each row a reader needs, labelled, with its value and share of the step; the recorder's
    calibration internals and raw times are never rows (they were ~30 raw keys, one of them
    `step_time_us` shown as "113 ms")."""
    d = Dispatch(
        ops_per_step=480,
        step_time_us=113000.0,
        step_time_source="the recorded steps",
        mean_op_us_raw=None,
        tiny_ops_per_step=12,
        tiny_op_us=25.0,
        between_ops_us_per_step=1500.0,
        between_ops_step_share=0.0133,
        recorder_function_entry_us=1.2,
        note="window of 10 steps",
    )
    section = dispatch_section(Profile(dispatch=d))
    assert section is not None
    rows = [tuple(c.text for c in r) for r in section.rows]
    assert rows == [
        ("step time", "113 ms", ""),
        ("  between ops (Python, dispatch)", "1.50 ms", "1.3%"),
        ("ops per step", "480", ""),
        ("  tiny ops (under 25.0 µs)", "12", ""),
    ]
    assert section.columns == ["measure", "value", "share"]
    assert section.note == "step time: the recorded steps. window of 10 steps"
    assert not any("_" in c.text for r in section.rows for c in r)
    counts_only = dispatch_section(Profile(dispatch=Dispatch(ops_per_step=3, mean_op_us=2.0)))
    assert counts_only is not None and counts_only.columns == ["measure", "value"]
    assert dispatch_section(Profile(dispatch=Dispatch())) is None


def test_trace_section_nests_one_level_and_counts_lists() -> None:
    trace = TraceDetails(
        profiler_window=ProfilerWindowInfo(file="t.json", steps=3),
        load_s=0.25,
        ranks=[],
        straggler=Straggler(
            rank=3,
            collectives_compared=10,
            mean_lateness_us={0: 1.0},
            wait_caused_us_per_collective=250.0,
            wait_caused_us_total=2500.0,
        ),
        note="n",
    )
    section = trace_section(Profile(trace=trace))
    assert section is not None
    assert [(r[0].text, r[1].text) for r in section.rows] == [
        ("profiler_window.file", "t.json"),
        ("profiler_window.steps", "3"),
        ("load_s", "250 ms"),
        ("ranks", "none"),
        ("straggler.rank", "3"),
        ("straggler.collectives_compared", "10"),
        ("straggler.wait_caused_us_per_collective", "250 µs"),
        ("straggler.wait_caused_us_total", "2.50 ms"),
    ]
    assert section.note == "n"
    assert trace_section(Profile(trace=TraceDetails(straggler=None)))  # a null is a row
    assert trace_section(Profile()) is None


def test_detail_sections_of_an_empty_profile() -> None:
    assert detail_sections(empty_profile()) == []


def test_printable_neutralises_terminal_control() -> None:
    assert printable("a\x1b[31mb\x07\r") == "a\\x1b[31mb\\x07\\x0d"
    assert printable("x\u202ey") == "x\\u202ey"
    assert printable("ünï 训练") == "ünï 训练"


def test_the_recorded_steps_data_wait_says_it_is_not_the_runs() -> None:
    """The dispatch table's data wait is of the few recorded steps (a run's 3 recorded steps:
    30.7 ms of 172 ms, 17.8%) while the breakdown's is of every step (12.5%): the table says
    whose figures it shows, so two numbers for one run are not read as one."""
    d = Dispatch(window_steps=3, step_time_us=172000.0, data_wait_us_per_step=30700.0)
    section = dispatch_section(Profile(dispatch=d))
    assert section is not None
    assert section.note is not None
    assert "recorded steps" in section.note and "the breakdown's" in section.note
    no_wait = dispatch_section(Profile(dispatch=Dispatch(window_steps=3, ops_per_step=5)))
    assert no_wait is not None and not no_wait.note
