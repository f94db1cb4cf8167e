"""Loop indexing: each loop reported at its own header line with exact iterations and ops."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import pytest
import torch
from probes_support import ROOT, by_site, context, host_document, load, record, site

from gpuopt.findings.engine import evaluate as evaluate_profile
from gpuopt.model.profile import Profile
from gpuopt.probes.loops import LoopIndex
from gpuopt.probes.recorder import DispatchRecorder

NAME = "planted_loops.py"


def evaluate(doc: dict) -> list[dict]:
    """The rules on the measured parts (the rest of the document at its defaults)."""
    return msgspec.to_builtins(evaluate_profile(msgspec.convert(doc, Profile)))


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


@pytest.fixture(scope="module")
def loops_doc(tmp_path_factory: pytest.TempPathFactory) -> dict:
    import os

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        mod = load(NAME)
        x = torch.randn(16, 8)
        return record(
            lambda i: mod["train_step"](x),
            steps=5,
            tmp_path=tmp_path_factory.mktemp("loops"),
            window_start=1,
            window_steps=3,
        )
    finally:
        os.chdir(cwd)


def test_loops_at_their_header_lines_with_exact_counts(loops_doc: dict) -> None:
    loops = by_site(loops_doc["loops"])
    # marker: (iterations, ops, indexing ops) per step
    expect = {
        "LOOP-ROWS": (16, 64, 48),  # x[i] (select), * 2 (mul), out[i] = (select + copy_)
        "LOOP-COMP": (8, 8, 8),  # x[i] in a comprehension; torch.stack is outside it
        "LOOP-INNER": (12, 36, 24),  # x[i, j] (two selects) + add, 4 x 3 iterations
        "LOOP-WHILE": (5, 5, 0),  # x + 1 while a Python counter runs down
        "LOOP-ONE-LINE": (6, 12, 6),  # body on the header's line: told apart by column
    }
    assert set(loops) == {site(NAME, m) for m in expect}
    for marker, (iterations, ops, indexing) in expect.items():
        e = loops[site(NAME, marker)]
        assert (e["iterations_per_step"], e["ops_per_step"], e["indexing_ops_per_step"]) == (
            iterations,
            ops,
            indexing,
        ), marker
        assert 0 <= e["time_share"] <= 1
    assert loops[site(NAME, "LOOP-ROWS")]["code"] == "for i in range(x.shape[0]):  # LOOP-ROWS"
    assert site(NAME, "LOOP-OUTER") not in loops  # its body's ops belong to the inner loop


def test_loop_indexing_findings_point_at_the_loops(loops_doc: dict) -> None:
    doc = dict(loops_doc, breakdown={})
    findings = [f for f in evaluate(doc) if f["id"] == "loop-indexing"]
    # >= 8 iterations with at least one indexing op per iteration
    assert {f["site"] for f in findings} == {
        site(NAME, "LOOP-ROWS"),
        site(NAME, "LOOP-INNER"),
        site(NAME, "LOOP-COMP"),
    }
    rows = next(f for f in findings if f["site"] == site(NAME, "LOOP-ROWS"))
    assert rows["evidence"]["iterations_per_step"] == 16
    assert rows["evidence"]["ops_per_step"] == 64
    assert rows["est_speedup"] >= 1.0 and "Amdahl" in rows["estimate_model"]
    assert "Vectorise" in rows["fix"]


SOURCE = """\
for i in range(len(xs)):            # 1
    a = xs[i]                       # 2
    while a > 0:                    # 3
        a = a - 1                   # 4
ys = [f(v) for v in xs if v]        # 5
for j in range(3): g(j)             # 6
"""


@pytest.mark.parametrize(
    ("line", "col", "expected"),
    [
        (1, 9, None),  # range(len(xs)): the iterable runs once, not per iteration
        (2, 8, 1),  # the for body
        (3, 10, 3),  # a while's test runs every iteration
        (4, 12, 3),  # the innermost loop wins
        (5, 6, 5),  # f(v): a comprehension's element
        (5, 26, 5),  # its condition
        (5, 20, None),  # xs: the first iterable of a comprehension runs once
        (6, 0, None),  # the header of a one-line loop ...
        (6, 19, 6),  # ... and its body, told apart by column
    ],
)
def test_loop_index_regions(line: int, col: int, expected: int | None) -> None:
    loop = LoopIndex(SOURCE).innermost(line, col)
    assert (loop.line if loop else None) == expected


def test_loop_index_tolerates_unparsable_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("for x in :\n")
    assert LoopIndex.from_file(str(bad)).loops == []
    assert LoopIndex.from_file(str(tmp_path / "missing.py")).loops == []


def test_loops_that_call_user_helpers_are_found_at_the_loop(tmp_path: Path) -> None:
    """The indexing happens in a helper (one or two calls deep): the loop that calls it is where
    the fix goes, with one iteration per call and the helper's line named."""
    mod = load(NAME)
    x = torch.randn(16, 8)
    doc = record(lambda i: mod["helpers_step"](x), steps=5, tmp_path=tmp_path)
    loops = by_site(doc["loops"])
    assert set(loops) == {site(NAME, "LOOP-VIA-HELPER"), site(NAME, "LOOP-VIA-TWO")}
    for marker, (iterations, kind) in {
        "LOOP-VIA-HELPER": (10, "for"),
        "LOOP-VIA-TWO": (7, "comprehension"),
    }.items():
        e = loops[site(NAME, marker)]
        # x[i] (select) * 3 (mul) per call
        assert (
            e["iterations_per_step"],
            e["ops_per_step"],
            e["indexing_ops_per_step"],
            e["kind"],
        ) == (iterations, 2 * iterations, iterations, kind), marker
        assert e["through"] == [site(NAME, "HELPER-LINE")]
    findings = [f for f in evaluate(dict(doc, breakdown={})) if f["id"] == "loop-indexing"]
    assert {f["site"] for f in findings} == {
        site(NAME, "LOOP-VIA-HELPER")
    }  # 7 < the rule's 8 iterations
    assert findings[0]["evidence"]["through"] == [site(NAME, "HELPER-LINE")]
    assert f"issued in {site(NAME, 'HELPER-LINE')}" in findings[0]["evidence"]["summary"]


def test_a_training_loop_calling_a_step_function_is_not_a_loop_finding(tmp_path: Path) -> None:
    """The user's own training loop calls the step once per step: its ops are not "loop" ops."""
    mod = load(NAME)
    x = torch.randn(16, 8)
    probe = DispatchRecorder()
    probe.start(context(tmp_path))
    try:
        mod["user_training_loop"](x, 5, lambda s: probe.on_step(s, time.perf_counter()))
    finally:
        probe.stop()
    doc = host_document(probe)
    loops = by_site(doc["loops"])
    assert set(loops) == {site(NAME, "LOOP-VIA-HELPER"), site(NAME, "LOOP-VIA-TWO")}
    assert loops[site(NAME, "LOOP-VIA-HELPER")]["iterations_per_step"] == 10


CLOSURE = """\
for i in range(steps):
    def closure():
        out = seq(x)
        for t in range(3):
            out = out + t
        return out
    optimizer.step(closure)
    f = lambda a: a + 1
    class Helper:
        w = [v for v in range(4)]
"""


@pytest.mark.parametrize(
    ("line", "col", "expect"),
    [
        (3, 8, None),  # the LBFGS closure's body: runs when optimizer.step calls it
        (5, 12, 4),  # a loop inside the closure is the closure's own
        (7, 4, 1),  # the training loop's body
        (8, 18, None),  # a lambda's body runs when it is called
        (10, 13, 10),  # a comprehension in a class body
    ],
)
def test_a_function_defined_in_a_loop_is_its_own_scope(
    line: int, col: int, expect: int | None
) -> None:
    """pytorch/examples time_sequence_prediction: the closure defined in the training loop was
    reported as "a Python loop: 21 iterations per step" at the training loop's `for`."""
    loop = LoopIndex(CLOSURE).innermost(line, col)
    assert (loop.line if loop else None) == expect
