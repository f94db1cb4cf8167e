"""gpuopt check's settings file and outputs: [tool.gpuopt.check] found upward or --config,
flags over the file, bad config in one line; Markdown (and $GITHUB_STEP_SUMMARY), JUnit XML,
GitHub annotations, JSON; bad input of every kind exits 2 without a traceback."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import SHARED_TRACES, public_file, run_gpuopt
from gate_support import finding, noisy, run, write
from typer.testing import CliRunner

from gpuopt.commands.cli import app
from gpuopt.gate.check import Thresholds, evaluate
from gpuopt.gate.config import Settings, find_config, load_settings, resolve
from gpuopt.gate.output import CheckResult, github_annotations, render_junit, render_markdown

runner = CliRunner()


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    """A baseline and a candidate 8% slower with one more sync per step."""
    base = write(tmp_path / "base.json", run(noisy(0.100, spread=0.005, seed=1)))
    cand = write(tmp_path / "cand.json", run(noisy(0.108, spread=0.005, seed=2), syncs=2.0))
    return base, cand


def _check(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return runner.invoke(app, ["check", *args], env=env)


def test_pyproject_is_found_upward_and_flags_override_it(
    pair: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, cand = pair
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.gpuopt.check]\nmax-step-time-regression = "20%"\n'
        'allow = ["sync-in-step"]\nmax_data_wait_increase = 5\n'
    )
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert find_config(deep) == tmp_path / "pyproject.toml"
    r = _check(str(cand), "--baseline", str(base), "--format", "json")
    doc = json.loads(r.stdout)
    step = next(g for g in doc["gates"] if g["id"] == "step_time")
    assert step["threshold"] == "+20.0%" and step["verdict"] == "pass"
    assert doc["config"].endswith("pyproject.toml [tool.gpuopt.check]")
    r = _check(str(cand), "--baseline", str(base), "--max-step-time-regression", "5%")
    assert "threshold +5.0%" in r.stdout and r.exit_code == 1
    th, strict = resolve({}, ["x"], None, load_settings(None, deep))
    assert th.allow == frozenset({"sync-in-step", "x"}) and th.max_data_wait_increase == 0.05
    assert strict is False


def test_config_file_flag_and_its_own_keys(pair: tuple[Path, Path], tmp_path: Path) -> None:
    base, cand = pair
    cfg = tmp_path / "gate.toml"
    cfg.write_text('step-time-noise = "0.5%"\nstrict = true\nmin-gpu-util = 50\n')
    th, strict = resolve({}, [], None, load_settings(cfg, tmp_path))
    assert (th.step_time_noise, th.min_gpu_util, strict) == (0.005, 0.5, True)
    th, strict = resolve({}, [], False, load_settings(cfg, tmp_path))
    assert strict is False  # --no-strict over the file


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[tool.gpuopt.check]\nmax-step-time = 5\n", "unknown key 'max-step-time'"),
        ("[tool.gpuopt.check\n", "not valid TOML"),
        ('[tool.gpuopt.check]\nmax-gpu-idle-increase = "3%"\n', "expected a number of pt"),
        ('[tool.gpuopt.check]\nallow = "x"\n', "allow must be a list"),
        ("[tool.gpuopt.check]\nstrict = 1\n", "strict must be true or false"),
        ("[tool.other]\nx = 1\n", "has no [tool.gpuopt.check] table"),
    ],
)
def test_bad_config_is_one_line_and_exit_2(
    pair: tuple[Path, Path], tmp_path: Path, content: str, message: str
) -> None:
    base, cand = pair
    cfg = tmp_path / "pyproject.toml"
    cfg.write_text(content)
    r = _check(str(cand), "--baseline", str(base), "--config", str(cfg))
    assert r.exit_code == 2 and message in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output


def test_missing_config_file(pair: tuple[Path, Path], tmp_path: Path) -> None:
    base, cand = pair
    r = _check(str(cand), "--baseline", str(base), "--config", str(tmp_path / "none.toml"))
    assert r.exit_code == 2 and "no such config file" in r.output


def _result(strict: bool = False) -> CheckResult:
    base = run(noisy(0.1, seed=1))
    cand = run(noisy(0.1, n=40, seed=2), syncs=2.0, sync_site="src/train.py:42")
    cand.findings = [finding("sync-in-step", title="a <b>|pipe| & `tick`", site="src/train.py:42")]
    gates = evaluate(base, cand, Thresholds())
    return CheckResult(gates, 1, ["base"], ["cand"], ["a note"], strict=strict)


def test_junit_has_one_case_per_gated_metric_and_fails_the_regressions() -> None:
    result = _result()
    root = ET.fromstring(render_junit(result))
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == [g.metric for g in result.gates]
    failed = [c.get("name") for c in cases if c.find("failure") is not None]
    assert failed == ["syncs per step", "new HIGH finding sync-in-step"]
    # skipped: the gpu and outside-ops gates, not measured
    assert root.get("failures") == "2" and root.find("testsuite").get("skipped") == "2"  # type: ignore[union-attr]
    syncs = next(c for c in cases if c.get("name") == "syncs per step")
    assert syncs.get("file") == "src/train.py"


def test_markdown_escapes_document_strings() -> None:
    text = render_markdown(_result())
    assert text.startswith("### gpuopt check: ❌ regression")
    assert "a &lt;b&gt;\\|pipe\\| &amp; \\`tick\\`" in text
    assert "| ❌ | syncs per step |" in text


def test_annotations_point_at_the_site() -> None:
    lines = github_annotations(_result(), Path("/repo"))
    assert lines[0].startswith("::error file=src/train.py,line=42,title=gpuopt check%3A syncs per")
    assert all(line.startswith("::error ") for line in lines)
    assert "%0A" not in lines[0] and "\n" not in "".join(lines)


def test_github_actions_get_annotations_a_step_summary_and_junit(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    base, cand = pair
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    junit = tmp_path / "out" / "check.xml"
    junit.parent.mkdir()
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    r = _check(str(cand), "--baseline", str(base), "--junit", str(junit), env=env)
    assert r.exit_code == 1
    assert "::error file=train.py,line=9,title=gpuopt check%3A syncs per step::1 → 2" in r.output
    assert summary.read_text().startswith("earlier step\n### gpuopt check: ❌ regression")
    failed = [
        c.get("name")
        for c in ET.parse(junit).getroot().iter("testcase")
        if c.find("failure") is not None
    ]
    assert "syncs per step" in failed


def test_strict_inconclusive_is_an_error_annotation() -> None:
    base, cand = run([0.1] * 5), run([0.1] * 5)
    gates = evaluate(base, cand, Thresholds())
    loose = CheckResult(gates, 0, ["a"], ["b"])
    strict = CheckResult(gates, 1, ["a"], ["b"], strict=True)
    assert github_annotations(loose)[0].startswith("::warning title=")
    assert github_annotations(strict)[0].startswith("::error title=")
    assert ET.fromstring(render_junit(strict)).get("failures") == "2"


def test_bad_inputs_exit_2_in_one_line(pair: tuple[Path, Path], tmp_path: Path) -> None:
    base, _ = pair
    corrupt = tmp_path / "profile.json"
    corrupt.write_text('{"schema": "gpuopt.profile/1", "steps": ')
    (tmp_path / "x.txt").write_text("not a run")
    cases = [
        [str(corrupt), "--baseline", str(base)],
        [str(tmp_path / "missing"), "--baseline", str(base)],
        [str(tmp_path / "x.txt"), "--baseline", str(base)],
        [str(base), "--baseline", str(base), "--junit", str(tmp_path)],
    ]
    for args in cases:
        r = _check(*args)
        assert r.exit_code == 2, (args, r.output)
        assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output


def test_an_unknown_format_is_a_usage_error(pair: tuple[Path, Path]) -> None:
    r = _check(str(pair[1]), "--baseline", str(pair[0]), "--format", "html")
    assert r.exit_code == 2 and "'html' is not one of" in r.output


def test_a_trace_against_a_profile_is_refused(pair: tuple[Path, Path]) -> None:
    trace = public_file(SHARED_TRACES / "hta" / "trace_compare" / "base" / "base.json.gz")
    r = _check(str(trace), "--baseline", str(pair[0]))
    assert r.exit_code == 2 and "compare like with like" in r.output


def test_settings_default_to_the_contract() -> None:
    th, strict = resolve({}, [], None, Settings())
    assert th == Thresholds() and strict is False


def test_o_writes_the_report_to_a_file_in_the_format_its_extension_asks(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    """`check -o FILE` as `compare -o FILE`: the report written whole to FILE ("wrote FILE" on
    stderr, nothing on stdout), its format from the extension unless --format says; the exit
    code the gate's."""
    base, cand = pair
    out = tmp_path / "gate.md"
    r = _check(str(cand), "--baseline", str(base), "-o", str(out))
    assert r.exit_code == 1 and r.stdout == "" and f"wrote {out}" in r.stderr
    assert out.read_text().startswith("### gpuopt check: ❌ regression")
    r = _check(str(cand), "--baseline", str(base), "--output", str(out), "--format", "json")
    assert r.exit_code == 1 and json.loads(out.read_text())["verdict"] == "regression"
    txt = tmp_path / "gate.log"
    r = _check(str(base), "--baseline", str(base), "-o", str(txt))
    assert r.exit_code == 0 and txt.read_text().rstrip().endswith("PASS")
    r = _check(str(base), "--baseline", str(base), "-o", "-")  # -: stdout, as compare takes it
    assert r.exit_code == 0 and r.stdout.rstrip().endswith("PASS")


def test_o_never_writes_over_an_input_or_the_junit_file(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    base, cand = pair
    before = base.read_bytes()
    junit = tmp_path / "gate.xml"
    cases = {
        ("-o", str(base)): "is an input of this command",
        ("-o", str(tmp_path)): "is a directory",
        ("-o", str(junit), "--junit", str(junit)): "--junit writes that file",
        ("-o", ""): "-o '': an empty path",
        ("-o", str(tmp_path / "gate.html")): "not 'html'",
    }
    for extra, message in cases.items():
        r = _check(str(cand), "--baseline", str(base), *extra)
        assert r.exit_code == 2, (extra, r.output)
        (line,) = r.output.strip().splitlines()
        assert line.startswith("gpuopt: error: ") and message in line, (extra, line)
    assert base.read_bytes() == before and not junit.exists()


def test_o_through_the_entry_points_fast_path(pair: tuple[Path, Path], tmp_path: Path) -> None:
    base, cand = pair
    out = tmp_path / "gate.json"
    r = run_gpuopt("check", str(cand), "--baseline", str(base), "-o", str(out))
    assert r.returncode == 1 and r.stdout == "" and f"wrote {out}" in r.stderr
    assert json.loads(out.read_text())["verdict"] == "regression"
