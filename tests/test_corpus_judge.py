"""The real-script corpus's expectations and judge, without running a script:
benchmarks/corpus/expect.toml parses and names what exists, and benchmarks/corpus_judge.judge
gives the right verdicts on small synthetic profiles (a recorded run's document, changed)."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, load_benchmark

from gpuopt.findings.engine import registered_rules

pytest.importorskip("tomllib")  # Python 3.11+, as the judge

CORPUS = ROOT / "benchmarks" / "corpus"
SCRIPT_DIR = "/corpus/scripts/demo"  # where the synthetic runs' script lay


cj = load_benchmark("corpus_judge")

EXPECT = """
[[script]]
name = "demo"
path = "demo/main.py"
args = ["--epochs", "1"]
marker = "optimizer.step"
sync_sites = ["main.py:40", "main.py:50-52"]
periodic_sync_sites = ["main.py:60"]
ragged_batch_sizes = [64, 16]

[[script.finding]]
id = "dataloader-bound"
site = "main.py:10-12"
severity = ["medium", "low"]

[[script.finding]]
id = "sync-in-step"
site = "main.py:40-60"
severity = ["low"]

[[script]]
name = "no-optimizer"
path = "demo/plain.py"
args = []

[[script]]
name = "inference"
path = "demo/infer.py"
args = []
trains = false
"""


def _expects() -> dict[str, Any]:
    return {e.name: e for e in cj.parse_expectations(EXPECT)}


def _finding(fid: str, severity: str, line: int | None) -> dict[str, Any]:
    site = None if line is None else f"{SCRIPT_DIR}/main.py:{line}"
    return {"id": fid, "severity": severity, "title": fid, "site": site}


def _profile(**changes: Any) -> dict[str, Any]:
    """A recorded run's profile.json (tests/data/golden), its sites moved into SCRIPT_DIR: steps
    found by optimizer.step, the window at steps 2-4, no findings, then ``changes``."""
    path = ROOT / "tests" / "data" / "golden" / "runs" / "slow_dataset.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    doc = copy.deepcopy(doc)
    doc["findings"] = []
    doc["syncs"] = [
        {"kind": "item", "site": f"{SCRIPT_DIR}/main.py:40", "count_per_step": 1.0},
        {"kind": "item", "site": f"{SCRIPT_DIR}/main.py:51", "count_per_step": 1.0},
    ]
    doc["dispatch"] = {**(doc.get("dispatch") or {}), "window_start": 2, "window_steps": 3}
    doc["ragged"] = {"batch_sizes": [16, 64]}
    doc.update(changes)
    return doc


def _judge(profile: dict[str, Any], name: str = "demo") -> Any:
    return cj.judge(_expects()[name], profile, SCRIPT_DIR)


DATA = {"none", "mnist", "wikitext", "sine", "shakespeare_char", "cifar10", "chars"}


def _in_scripts_tree(sources: dict[str, Any], path: str) -> tuple[Any, str]:
    """The source whose ``scripts`` folder holds ``path`` of the scripts tree, and its upstream
    path."""
    for src in sources.values():
        if src.scripts is None:
            continue
        prefix = "" if src.scripts == "." else f"{src.scripts}/"
        if path.startswith(prefix) and path.removeprefix(prefix) in src.files:
            return src, path.removeprefix(prefix)
    raise AssertionError(f"{path}: in no source's scripts (sources.toml)")


def test_expect_toml_parses_and_names_scripts_and_lines_that_exist() -> None:
    """Each script and each file a site names is in its source's file list (sources.toml: the
    scripts tree, or the source the script names), its lines checked where the source's files
    were copied here (bench_corpus's set-up)."""
    expects = cj.load_expectations(CORPUS / "expect.toml")
    sources = load_benchmark("corpus_sources").load_sources(CORPUS / "sources.toml")
    assert len(expects) >= 11
    known_ids = {r.finding_id for r in registered_rules().values()}
    for e in expects:
        assert e.data in DATA, e.name
        patterns = [*e.sync_sites, *e.periodic_sync_sites, *(e.loop_sites or ())]
        patterns += [f.site for f in e.findings if f.site is not None]
        if e.source is None:
            src, path = _in_scripts_tree(sources, e.path)
            folder = str(Path(path).parent).removeprefix(".")
            listed = {str(Path(folder) / p.file) for p in patterns}
            assert listed <= set(src.files), f"{e.name}: {listed - set(src.files)}"
            fetched = CORPUS / ".cache" / "scripts" / Path(e.path).parent
        else:
            listed = sources[e.source].files
            assert e.path in listed, f"{e.name}: {e.path} not in sources.toml"
            assert all(p.file in listed for p in patterns), e.name
            fetched = CORPUS / ".cache" / "sources" / e.source
        files = {p.file: fetched / p.file for p in patterns if (fetched / p.file).is_file()}
        for p in patterns:
            if p.file in files:
                assert files[p.file].is_file(), f"{e.name}: {p}"
                assert p.last <= len(files[p.file].read_text().splitlines()), f"{e.name}: {p}"
        for f in e.findings:
            assert f.id in known_ids, f"{e.name}: {f.id} is no finding gpuopt has"
    names = {e.name for e in expects}
    assert {"mnist", "vae", "dcgan", "imagenet", "regression", "nanogpt"} <= names
    assert {"mnist_forward_forward", "mnist_rnn", "chargpt", "cifar10_tutorial"} <= names


def test_a_profile_that_meets_every_expectation_passes_and_is_all_right() -> None:
    right = [_finding("dataloader-bound", "medium", 11), _finding("sync-in-step", "low", 51)]
    v = _judge(_profile(findings=right))
    assert (v.passed, v.all_right) == (True, True)
    assert v.syncs_found == ("main.py:40", "main.py:50-52") and v.syncs_missing == ()
    assert [f.verdict for f in v.findings] == ["right", "right"]
    assert v.findings[0].site == "main.py:11"  # relative to the script's folder


def test_a_high_finding_the_expectation_does_not_allow_is_a_false_high() -> None:
    v = _judge(_profile(findings=[_finding("dataloader-bound", "high", 11)]))
    assert v.findings[0].verdict == "wrong-severity"
    assert [f.id for f in v.false_highs] == ["dataloader-bound"]
    assert not v.passed


def test_an_unlisted_finding_is_unexpected_and_a_high_one_fails_the_bar() -> None:
    low = _judge(_profile(findings=[_finding("launch-bound", "low", 30)]))
    assert low.findings[0].verdict == "unexpected"
    assert low.passed and not low.all_right  # only a HIGH one fails the corpus's bar
    high = _judge(_profile(findings=[_finding("launch-bound", "high", 30)]))
    assert not high.passed and len(high.false_highs) == 1


def test_a_finding_at_the_wrong_line_is_wrong_site() -> None:
    # the DataLoader finding naming the `for` line (main.py:30), not the construction (10-12)
    v = _judge(_profile(findings=[_finding("dataloader-bound", "medium", 30)]))
    assert v.findings[0].verdict == "wrong-site"
    outside = _judge(
        _profile(
            findings=[
                {"id": "dataloader-bound", "severity": "low", "site": "/elsewhere/main.py:11"}
            ]
        )
    )
    assert outside.findings[0].verdict == "wrong-site"  # same name, other folder


def test_more_findings_than_one_cause_accounts_for_are_duplicates() -> None:
    findings = [_finding("sync-in-step", "low", line) for line in (40, 51, 60)]
    v = _judge(_profile(findings=findings))
    assert [f.verdict for f in v.findings] == ["right", "duplicate", "duplicate"]
    assert v.passed and not v.all_right


def test_no_steps_in_a_script_that_trains_fails_and_in_one_that_does_not_passes() -> None:
    none = {"count": 0, "measured": 0, "time_s": None, "marked_by": []}
    empty = _profile(steps=none, syncs=[], dispatch={"window_start": None, "window_steps": 0})
    v = _judge(empty, "no-optimizer")
    assert (v.steps_ok, v.window_ok, v.passed) == (False, False, False)
    assert _judge(empty, "inference").passed


def test_a_step_found_by_another_marker_than_expected_fails() -> None:
    steps = {**_profile()["steps"], "marked_by": ["gpuopt.step"]}
    v = _judge(_profile(steps=steps))
    assert not v.marker_ok and not v.passed
    assert _judge(_profile(steps=steps), "no-optimizer").passed  # no marker expected there


def test_a_window_after_the_last_step_fails() -> None:
    steps = {**_profile()["steps"], "count": 2}
    v = _judge(_profile(steps=steps, dispatch={"window_start": 2, "window_steps": 1}))
    assert not v.window_ok and not v.passed
    assert "after the 2 steps" in " ".join(v.notes)


def test_a_per_step_sync_site_missing_fails_and_a_periodic_one_may_be_missing() -> None:
    only_40 = [{"kind": "item", "site": f"{SCRIPT_DIR}/main.py:40", "count_per_step": 1.0}]
    v = _judge(_profile(syncs=only_40))
    assert v.syncs_missing == ("main.py:50-52",) and not v.passed
    # main.py:60 (periodic) was never in the syncs above, and the full profile passes without it
    assert _judge(_profile()).passed


def test_an_evaluation_loaders_batch_sizes_in_the_ragged_table_are_flagged() -> None:
    v = _judge(_profile(ragged={"batch_sizes": [16, 64, 500]}))
    assert not v.ragged_ok and v.passed and not v.all_right
    assert "[500]" in " ".join(v.notes)


def test_a_failed_run_fails_with_its_error() -> None:
    v = _judge(
        _profile(status="error", exit_code=1, error={"type": "OverflowError", "message": "x"})
    )
    assert not v.exit_ok and not v.passed
    assert "OverflowError" in v.notes[0]


@pytest.mark.parametrize("text", ["main.py", "main.py:x", "main.py:9-3", ":4"])
def test_a_malformed_site_pattern_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        cj.SitePattern.parse(text)


def test_an_unknown_severity_is_refused() -> None:
    bad = '[[script]]\nname="a"\npath="a.py"\n[[script.finding]]\nid="x"\nseverity=["huge"]\n'
    with pytest.raises(ValueError, match="severities"):
        cj.parse_expectations(bad)


LOOPS_AND_MEMORY = """
[[script]]
name = "demo"
path = "demo/main.py"
args = []
loop_sites = ["model.py:20"]
replay_notes = ["LSTM reserve space"]
"""


def test_a_loop_the_expectation_rules_out_and_a_replay_without_its_notes_are_flagged() -> None:
    """Recording the losses made the training loop a 4-iteration loop in the step; a replay in
    evaluation mode lacks the LSTM's training workspace: both make a run not all right."""
    (e,) = cj.parse_expectations(LOOPS_AND_MEMORY)
    lstm = "cuDNN's LSTM reserve space (its measured size) modelled for 1 call(s)"
    memory = {"predicted": {"notes": [lstm]}}
    loop = {"site": f"{SCRIPT_DIR}/model.py:20", "iterations_per_step": 3}
    good = cj.judge(e, _profile(loops=[loop], memory=memory), SCRIPT_DIR)
    assert good.loops_ok and good.memory_ok and good.all_right
    extra = {"site": f"{SCRIPT_DIR}/main.py:45", "iterations_per_step": 4}
    v = cj.judge(e, _profile(loops=[loop, extra], memory=memory), SCRIPT_DIR)
    assert not v.loops_ok and v.passed and not v.all_right
    assert "main.py:45" in " ".join(v.notes)
    v = cj.judge(e, _profile(memory={"predicted": {"notes": ["usable: 71.7 GiB"]}}), SCRIPT_DIR)
    assert not v.memory_ok and not v.all_right
    v = cj.judge(e, _profile(memory={"note": "no module call was recorded"}), SCRIPT_DIR)
    assert not v.memory_ok and "no module call" in " ".join(v.notes)
