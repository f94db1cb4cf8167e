"""gpuopt compare and gpuopt report with several paths: side by side, changes with
intervals, findings new / gone / changed / moved, per-rank rows, kernels of traces; HTML that
escapes every string and loads nothing; bad input in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import DATA
from gate_support import finding, loaded, noisy, run, write
from typer.testing import CliRunner

from gpuopt.assemble.step_stats import breakdown
from gpuopt.commands.cli import app
from gpuopt.gate.check import DATA_WAIT_DRIFT, ONE_RUN_DRIFT, Thresholds, data_wait_gate
from gpuopt.gate.check import step_time_gate as step_gate
from gpuopt.gate.compare import NO_INTERVAL_BUSY, compare, finding_changes
from gpuopt.gate.compare_render import render
from gpuopt.loading import load

runner = CliRunner()
HOSTILE = DATA / "report" / "hostile.json"
RANKS = DATA / "report" / "gpu_ranks.json"


def test_findings_new_gone_changed_and_moved() -> None:
    a, b = run([0.1] * 20), run([0.1] * 20)
    a.findings = [
        finding("dataloader-bound", est=1.5),
        finding("pageable-h2d", site="t.py:5"),
        finding("sync-in-step", site="t.py:10"),
    ]
    b.findings = [
        finding("dataloader-bound", severity="medium", est=1.2),
        finding("sync-in-step", site="t.py:12"),
        finding("launch-bound", severity="low", site=None),
    ]
    got = {(c.status, c.id): c for c in finding_changes(a, b)}
    assert set(got) == {
        ("new", "launch-bound"),
        ("gone", "pageable-h2d"),
        ("changed", "dataloader-bound"),
        ("moved", "sync-in-step"),
    }
    assert got[("changed", "dataloader-bound")].detail == (
        "severity high → medium; estimate 1.50× → 1.20×"
    )
    assert got[("moved", "sync-in-step")].detail == "from t.py:10"


def test_every_metric_with_its_change_and_interval() -> None:
    a = run(noisy(0.100, seed=1), syncs=1.0)
    b = run(noisy(0.300, seed=2), syncs=3.0)  # beyond the drift one run a side assumes
    c = compare(["a", "b"], [a, b])
    rows = {r.metric: r for r in c.rows}
    step = rows["step time (median)"]
    assert step.changes[0].startswith("+") and step.intervals[0].startswith("90% interval +")
    assert rows["syncs per step"].values == ["1", "3"] and rows["syncs per step"].changes == ["+2"]
    text = render(c, "text")
    assert "B vs A" in text and "Findings, B vs A\n  no change" in text


def test_time_outside_tensor_ops_with_the_gates_interval() -> None:
    """The share of the window steps outside ops at named lines (a sleep the step gained), next
    to "other", with the outside-ops gate's interval; "–" for a run without a recorder window."""
    from gpuopt.model.records import OutsideSite

    a, b, c = run([0.1] * 20), run([0.1] * 20), run([0.1] * 20)
    a.dispatch.outside_ops_us_per_step = 0.0
    b.dispatch.outside_ops_us_per_step = 20_000.0
    b.dispatch.outside_ops_sites = [
        OutsideSite(site="t.py:9", frame="t.py:9", time_us_per_step=2e4, time_share=0.2, samples=9)
    ]
    rows = {r.metric: r for r in compare(["a", "b", "c"], [a, b, c]).rows}
    row = rows["outside tensor ops, named (share of step)"]
    assert row.values == ["0.0%", "20.0%", "–"] and row.changes[0] == "+20.0pt"
    assert row.intervals[0].startswith("90% interval +") and row.intervals[1] == ""


def test_three_runs_compare_with_the_first() -> None:
    runs = [run(noisy(0.1 * k, seed=k)) for k in (1, 2, 3)]
    text = render(compare(["a", "b", "c"], runs), "md")
    assert "| B vs A | C vs A |" in text and "### Findings, C vs A" in text


def test_per_rank_rows_for_multi_rank_runs() -> None:
    p = load(RANKS)
    c = compare(["x", "y"], [p, p])
    groups = {r.group for r in c.ranks}
    assert groups == {"rank 0", "rank 1", "rank 2", "rank 3"}
    assert any(r.metric == "GPU idle (share of time)" for r in c.ranks)


def test_traces_show_the_kernels_that_changed(shared_traces: Path) -> None:
    folder = shared_traces / "hta" / "trace_filter"
    one = shared_traces / "hta" / "timeline_analysis" / "sampled_rank-0.json.gz"
    c = compare([str(one), str(folder)], [load(one), load(folder)])
    assert [r for r in c.kernels if r.group == "kernel types"]
    kernels = [r for r in c.kernels if r.group == "kernels"]
    assert 0 < len(kernels) <= 10
    header = render(c, "text").splitlines()[1]
    assert header == f"A = {one}: trace · cuda · {c.runs[0].steps} measured steps · ok"


def test_html_escapes_every_string_and_loads_nothing(tmp_path: Path) -> None:
    out = tmp_path / "c.html"
    r = runner.invoke(app, ["compare", str(HOSTILE), str(HOSTILE), "-o", str(out)])
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert "<script" not in page and "<b>" not in page
    assert "&lt;script&gt;" in page
    assert (
        "default-src &#x27;none&#x27;" in page and "http://" not in page and "https://" not in page
    )


def test_html_draws_each_metric_as_a_pair_of_bars() -> None:
    """Before and after, per metric: one group of bars per metric both runs measured, one bar a
    run, the longer bar the larger value; names escaped; the chart is inline SVG."""
    import re
    from dataclasses import replace

    a, b = run(noisy(0.100, seed=1), syncs=1.0), run(noisy(0.300, seed=2), syncs=3.0)
    c = compare(["a", "b"], [a, b])
    c.rows.append(replace(c.rows[0], metric="<b>odd</b> & name"))
    page = render(c, "html")
    svg = page[page.index("<svg") : page.index("</svg>")]
    groups = re.findall(r'<g class="metric" data-metric="([^"]*)">(.*?)</g>', svg)
    measured = [r for r in c.rows if r.numbers[0] is not None and r.numbers[1] is not None]
    assert len(groups) == len(measured) >= 10
    assert all(len(re.findall(r'<rect class="bar"', g)) == 2 for _, g in groups)
    widths = {
        name: [float(w) for w in re.findall(r'class="bar" x="\d+" y="\d+" width="([0-9.]+)"', g)]
        for name, g in groups
    }
    assert widths["syncs per step"][0] < widths["syncs per step"][1]  # 1 against 3
    assert widths["step time (median)"][0] < widths["step time (median)"][1]
    assert "&lt;b&gt;odd&lt;/b&gt; &amp; name" in svg and "<b>" not in page
    assert "B 3 (+2)" in svg  # the value and its change beside the bar


def test_json_document(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", run(noisy(0.1, seed=1)))
    b = write(tmp_path / "b.json", run(noisy(0.1, seed=2)))
    r = runner.invoke(app, ["compare", str(a), str(b), "--format", "json"])
    doc = json.loads(r.stdout)
    assert doc["schema"] == "gpuopt.compare/1" and [x["path"] for x in doc["runs"]] == [
        str(a),
        str(b),
    ]
    assert {"rows", "findings", "ranks", "kernels", "notes"} <= set(doc)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ONE"], "needs two runs or more"),
        (["ONE", "MISSING"], "no such file or directory"),
        (["ONE", "CORRUPT"], "CORRUPT"),
        (["ONE", "ONE", "-o", "ONE"], "is an input of this command"),
        (["ONE", "ONE", "-o", "NOWHERE"], "NOWHERE: cannot write: "),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    paths = {
        "ONE": str(write(tmp_path / "a.json", run([0.1] * 10))),
        "MISSING": str(tmp_path / "none"),
        "CORRUPT": str(tmp_path / "profile.json"),
        "NOWHERE": str(tmp_path / "a.json" / "c.md"),  # under a file: cannot be written
    }
    (tmp_path / "profile.json").write_text("{nope")
    r = runner.invoke(app, ["compare", *(paths.get(a, a) for a in args)])
    message = message.replace("CORRUPT", paths["CORRUPT"]).replace("NOWHERE", paths["NOWHERE"])
    assert r.exit_code == 2 and message in r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output


def test_report_renders_several_paths_one_after_another(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", run([0.1] * 10))
    r = runner.invoke(app, ["report", str(a), str(RANKS), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert [d["script"] for d in json.loads(r.stdout)] == ["train.py", load(RANKS).script]
    r = runner.invoke(app, ["report", str(a), str(RANKS), "--format", "md"])
    assert r.stdout.count("\n---\n") >= 1 and r.stdout.count("# gpuopt") >= 2
    page = tmp_path / "two.html"
    r = runner.invoke(app, ["report", str(a), str(RANKS), "-o", str(page)])
    assert r.exit_code == 0 and page.read_text().count('<article class="run">') == 2
    r = runner.invoke(app, ["report", str(a), str(tmp_path / "none")])
    assert r.exit_code == 2 and "no such file or directory" in r.output


def _interval(text: str) -> str:
    line = next(x for x in text.splitlines() if x.startswith("step time (median)"))
    return line[line.index("(90% interval") :]


def test_noise_floors_come_from_the_flags_and_the_settings_check_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compare draws check's intervals: the same floors, from the same flags and settings file."""
    a = str(write(tmp_path / "a.json", run(noisy(0.1, seed=1))))
    b = str(write(tmp_path / "b.json", run(noisy(0.11, seed=2))))
    monkeypatch.chdir(tmp_path)
    plain = runner.invoke(app, ["compare", a, b])
    # one run against another: the drift assumed for one run a side, and it says so
    assert plain.exit_code == 0 and (
        f"run-to-run drift of {ONE_RUN_DRIFT:.1%} in step time and {DATA_WAIT_DRIFT * 100:.1f}pt "
        "in the data-wait share, the drift assumed for one run against another"
    ) in " ".join(plain.output.split())
    wide = runner.invoke(app, ["compare", a, b, "--step-time-noise", "3%"])
    assert _interval(wide.output) != _interval(plain.output)
    assert (
        "at least 3.0% in step time and 3.0pt in the data-wait share (from the command line;"
        in " ".join(wide.output.split())
    )
    (tmp_path / "pyproject.toml").write_text('[tool.gpuopt.check]\nstep-time-noise = "3%"\n')
    from_file = runner.invoke(app, ["compare", a, b])
    assert _interval(from_file.output) == _interval(wide.output)
    assert "pyproject.toml [tool.gpuopt.check]" in from_file.output
    flag_wins = runner.invoke(app, ["compare", a, b, "--step-time-noise", f"{ONE_RUN_DRIFT:.0%}"])
    assert _interval(flag_wins.output) == _interval(plain.output)
    check = runner.invoke(app, ["check", b, "--baseline", a, "--format", "json"])
    gate = next(g for g in json.loads(check.stdout)["gates"] if g["id"] == "step_time")
    assert _interval(from_file.output) == f"({gate['detail'].split(';')[0]})"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--share-noise", "5%"], "'5%': expected a number of pt, e.g. 5pt"),
        (["--config", "nope.toml"], "nope.toml: no such config file"),
    ],
)
def test_bad_noise_setting_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    a = str(write(tmp_path / "a.json", run(noisy(0.1, seed=1))))
    r = runner.invoke(app, ["compare", a, a, *args])
    assert r.exit_code == 2 and message in r.output
    assert len(r.output.strip().splitlines()) == 1


def _uneven(wait_long: float) -> tuple[list[float], list[float]]:
    """Two warm-up steps, then short steps that wait half their time and long ones that wait
    ``wait_long`` of theirs (a loader's slow batches, as examples/io_loader.py's)."""
    times = [0.1, 0.1] + [0.1, 0.4] * 10
    waits = [0.0, 0.0] + [0.05, 0.4 * wait_long] * 10
    return times, waits


def test_data_wait_is_the_reports_number_in_compare_and_check() -> None:
    """One number per run: the measured steps' wait over their time, as the report's breakdown
    (10.0% and 30.0% here), never the mean of the steps' shares (25.0% and 37.5%: a 0.1 s step
    weighed like a 0.4 s one). compare and check show it and draw their interval around it."""
    a, b = run(*_uneven(0.0)), run(*_uneven(0.25))
    reports = [breakdown(t[2:], w[2:]).data_wait for t, w in (_uneven(0.0), _uneven(0.25))]
    assert reports == pytest.approx([0.1, 0.3])
    row = next(r for r in compare(["a", "b"], [a, b]).rows if r.metric.startswith("data wait"))
    assert row.values == ["10.0%", "30.0%"] and row.changes == ["+20.0pt"]
    gate = data_wait_gate([a], [b], Thresholds())
    assert (gate.baseline, gate.candidate, gate.change) == ("10.0%", "30.0%", "+20.0pt")
    assert gate.detail.split(";")[0] == row.intervals[0]  # the same interval


def test_one_run_a_side_data_wait_interval_carries_the_run_to_run_drift() -> None:
    """Steps that all wait the same share: no within-run variation, so the interval is the
    drift alone — the 3pt measured between identical runs (check's one-run floor), not the 1pt
    default floor that made a 5pt difference look sure."""
    a = run([0.1] * 20, [0.020] * 20)
    b = run([0.1] * 20, [0.025] * 20)
    row = next(r for r in compare(["a", "b"], [a, b]).rows if r.metric.startswith("data wait"))
    low, high = (float(x.rstrip("pt")) for x in row.intervals[0].split("interval ")[1].split(" … "))
    half = 1.6449 * DATA_WAIT_DRIFT * 2**0.5 * 100  # two runs' drift, 90% two-sided
    assert low < 0 < high and (high - low) / 2 == pytest.approx(half, rel=0.1)


def test_a_run_on_a_busy_machine_gets_no_interval_and_says_why() -> None:
    """Identical code, B slowed by neighbours (its threads waited 60% of their time for a core):
    check calls its timings inconclusive; compare draws no interval for B vs A and says which run
    and why, and keeps C's (a quiet run)."""
    a = run(noisy(0.1, seed=1))
    b = loaded(run(noisy(0.13, seed=2)), other_cores=1.8, run_delay=0.6)
    c = run(noisy(0.1, seed=3))
    comp = compare(["a", "b", "c"], [a, b, c])
    rows = {r.metric: r for r in comp.rows}
    for metric in ("step time (median)", "data wait (share of step)"):
        assert rows[metric].intervals[0] == NO_INTERVAL_BUSY, metric
        assert rows[metric].intervals[1].startswith("90% interval"), metric
    (note,) = [n for n in comp.notes if "busy machine" in n]
    assert "b (other processes kept 1.80 of 2 cores busy; its threads waited 60%" in note
    assert "run both on a quiet machine" in note
    assert step_gate([a], [b], Thresholds(), busy="busy").verdict == "inconclusive"
    assert f"({NO_INTERVAL_BUSY})" in render(comp, "text")
