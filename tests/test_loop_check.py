"""The check of loop rewrites on the inputs of the real run: the script runs in a child process,
each loop's inputs are captured at its first execution (saved with torch.save, never loaded by
gpuopt), old and new code run on copies side by side; a loop that never runs is not-reached.
And the comparison itself: integers bit for bit, floats exact or within tolerance."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from gpuopt.fixes.loops.check import (
    CheckSpec,
    Verdict,
    compare,
    load_results,
    run_loop_checks,
)
from gpuopt.fixes.loops.vectorize import rewrite_vectorize

SCRIPT = textwrap.dedent(
    """
    import torch

    def masks_of(seg):
        m = torch.zeros(seg.shape[0], 5, seg.shape[1])
        for c in range(5):
            m[:, c] = seg == c
        return m

    def never(x):
        out = torch.empty_like(x)
        for i in range(len(x)):
            out[i] = x[i] * 2
        return out

    def wrong(x, w):
        out = torch.zeros(len(x), len(w))
        for i in range(len(x)):
            out[i] = (x[i] * w).sum(-1)
        return out

    seg = torch.randint(0, 5, (3, 7))
    print(masks_of(seg).sum().item())
    print(wrong(torch.randn(4, 3), torch.randn(4, 3)).shape)
    """
).lstrip()


@pytest.mark.slow
def test_child_run_checks_each_loop_on_its_own_inputs(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    lines = [i for i, t in enumerate(SCRIPT.splitlines(), 1) if t.strip().startswith("for ")]
    rewrite = rewrite_vectorize(SCRIPT, lines)
    specs = [
        CheckSpec(
            f"loop-{c.line}",
            str(script),
            c.line,
            c.capture_line,
            c.old,
            c.new,
            c.reads,
            c.writes,
            c.preconditions,
        )  # fmt: skip
        for c in rewrite.changes
    ]
    assert len(specs) == 3
    out = tmp_path / "loops"
    results = run_loop_checks(str(script), [], specs, out)
    masks, never, wrong = (results[s.id] for s in specs)
    assert masks.verdict == "exact", masks.detail
    assert masks.inputs["seg"] == "int64 (3, 7)" and masks.inputs_file == f"{specs[0].id}.pt"
    assert "equal, bit for bit" in masks.says()
    saved = torch.load(out / masks.inputs_file)  # what was checked, kept for the user
    assert set(saved) >= {"seg", "m"} and saved["m"].abs().sum() == 0  # before the loop ran
    assert never.verdict == "not-reached" and "did not run" in never.says()
    assert wrong.verdict == "failed" and "not the same" in wrong.detail
    assert {r.id for r in load_results(out)} == {masks.id, wrong.id}  # the JSON results only


def test_comparisons() -> None:
    def verdict(a: object, b: object) -> str:
        v = Verdict()
        compare(a, b, "x", v)
        return v.verdict

    t = torch.tensor([1.0, float("nan"), 3.0])
    assert verdict(t, t.clone()) == "exact"  # NaN in the same places
    assert verdict(torch.tensor([1, 2]), torch.tensor([1, 3])) == "failed"  # integers: bitwise
    assert verdict(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0 + 1e-6])) == "tolerance"
    assert verdict(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.1])) == "failed"
    assert verdict(torch.ones(2), torch.ones(2, dtype=torch.float64)) == "failed"  # dtype
    assert verdict(torch.ones(2), torch.ones(1, 2)) == "failed"  # shape
    assert verdict([torch.ones(2)], [torch.ones(2)]) == "exact"
    assert verdict(0, torch.zeros(())) == "failed"  # a Python number became a tensor
