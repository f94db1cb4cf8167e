"""`gpuopt optimize` with the loop fixes, as a user runs it (subprocesses, real CPU runs): the
class-mask loop vectorized and checked on the run's own inputs before any diff is shown (also
with --no-measure), the per-sample loss loop batched with padding (tolerance), the opt-in
padding-batch shown as a diff and applied only when named, and TransUNet's DiceLoss (public
code) vectorized with its training exact."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import msgspec
import pytest
from conftest import DATA, ROOT, public_file, run_gpuopt
from typer.testing import CliRunner

import gpuopt.optimize.output.results as results_module
from gpuopt.commands.cli import app
from gpuopt.model.optimize import Gain, OptimizeDocument

pytestmark = pytest.mark.slow
# One intra-op thread: on a loaded 2-core machine an op large enough for torch to split across
# two threads waits for a second thread the scheduler may not run for milliseconds, which would
# make any batched rewrite look slower at random (the speed is the benchmarks' business).
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def _copy(tmp: Path, name: str) -> Path:
    dst = tmp / name
    shutil.copy(ROOT / "examples" / name, dst)
    return dst


def _doc(path: Path) -> OptimizeDocument:
    return msgspec.json.decode((path / "optimize.json").read_bytes(), type=OptimizeDocument)


def _applies(tmp: Path, patch: str) -> None:
    (tmp / "fix.patch").write_text(patch)
    subprocess.run(["git", "init", "-q"], cwd=tmp, check=True)
    check = subprocess.run(["git", "apply", "--check", "fix.patch"], cwd=tmp, capture_output=True)
    assert check.returncode == 0, check.stderr


def test_class_masks_vectorized_and_checked_before_any_diff(tmp_path: Path) -> None:
    script = _copy(tmp_path, "segmentation_loops.py")
    r = run_gpuopt(
        "optimize", "--no-measure", "--fix", "vectorize", "-o", "out", script.name,
        cwd=tmp_path, timeout=400, env=ONE_THREAD,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "+    masks[:, :NUM_CLASSES] = seg.unsqueeze(1) == c.view(" in r.stdout
    assert "-    for c in range(NUM_CLASSES):" in r.stdout
    _applies(tmp_path, r.stdout)
    doc = _doc(tmp_path / "out")
    (fix,) = [f for f in doc.fixes if f.id == "vectorize"]
    assert fix.mode == "source" and doc.status == "planned", fix.reason  # --no-measure
    assert any("class-masks: checked on the inputs of its first run" in n for n in fix.notes)
    assert any("equal, bit for bit" in n for n in fix.notes)
    (check,) = json.loads((tmp_path / "out" / "loops" / "done.json").read_text()).values()
    assert check == 1
    saved = list((tmp_path / "out" / "loops").glob("vectorize-*.pt"))
    assert len(saved) == 1  # the inputs it was checked on


def test_per_sample_loop_padded_within_tolerance(tmp_path: Path) -> None:
    script = _copy(tmp_path, "ragged_steps.py")
    r = run_gpuopt(
        "optimize", "--quick", "--steps", "10", "--fix", "padding", "-o", "out", script.name,
        "--samples", "256",
        cwd=tmp_path, timeout=400, env=ONE_THREAD,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = _doc(tmp_path / "out")
    (fix,) = [f for f in doc.fixes if f.id == "padding"]
    assert "+            x, y = pad_collate(xs), pad_collate(ys)  # PER-SAMPLE" in fix.diff
    assert "+from gpuopt.batching import masked_loss, pad_collate" in fix.diff
    if fix.applied:
        assert fix.verified in ("exact", "tolerance") and r.stdout == doc.diff, fix.reason
    else:  # measurably slower in this run: a timing verdict, never a changed training
        assert "slower in the training run" in fix.reason, fix.reason
    assert any("padding: checked on the inputs of its first run" in n for n in fix.notes)
    assert script.read_text() == (ROOT / "examples" / "ragged_steps.py").read_text()


def test_padding_batch_is_a_suggestion_with_its_diff_unless_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _copy(tmp_path, "ragged_steps.py")
    args = [script.name, "--mode", "one", "--samples", "128"]
    r = run_gpuopt(
        "optimize", "--no-measure", "-o", "a", *args, cwd=tmp_path, timeout=300, env=ONE_THREAD
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""  # opt-in: not in the default diff
    (fix,) = [f for f in _doc(tmp_path / "a").fixes if f.id == "padding-batch"]
    assert fix.mode == "suggestion" and not fix.applied and fix.opt_in
    assert "batch_sampler=LengthBucketSampler(sample_lengths(data), batch_size=16" in fix.diff
    # named, it is applied: what the code decides from the runs' gain, given here as a quiet
    # machine measures it (under load the two runs may time it slower and drop it: that
    # decision is tested in test_optimize_drops.py; the gain itself in the benchmarks)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    measured = Gain(1.3, low=1.2, high=1.4, noise=0.03, measurable=True, label="1.30x faster")
    monkeypatch.setattr(results_module, "gain", lambda *a, **kw: measured)
    named = CliRunner().invoke(
        app, ["optimize", "--quick", "--steps", "10", "--fix", "padding-batch", "-o", "b", *args]
    )
    assert named.exit_code == 0, named.stderr
    _applies(tmp_path, named.stdout)
    doc = _doc(tmp_path / "b")
    (fix,) = [f for f in doc.fixes if f.id == "padding-batch"]
    assert fix.applied and fix.verified == "not-comparable"
    assert doc.verification is not None and "after the same" in doc.verification.detail
    assert doc.gain is not None and doc.gain.speedup is not None


def _dice_optimized(work: Path, module: str, masks_line: int, item_line: int) -> str:
    """``gpuopt optimize --fix vectorize`` on train_dice.py in ``work`` (its Dice loss in
    ``module``): the one-hot loop at ``masks_line`` rewritten and checked bit for bit, the class
    loop at ``item_line`` left alone (.item()), the report saying so in every format."""
    r = run_gpuopt(
        "optimize", "--quick", "--steps", "12", "--fix", "vectorize", "-o", "out",
        "train_dice.py",
        cwd=work, timeout=400, env=ONE_THREAD,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = _doc(work / "out")
    (fix,) = [f for f in doc.fixes if f.id == "vectorize"]
    assert f"{module}:{masks_line}: class-masks: checked" in " ".join(fix.notes), fix.notes
    assert any("bit for bit" in n for n in fix.notes if f"{module}:{masks_line}:" in n)
    assert any(s.startswith(f"{module}:{item_line}:") and ".item()" in s for s in fix.skipped)
    for fmt in ("md", "html"):  # the report says why a loop was left alone, in every format
        shown = run_gpuopt("report", "out", "--format", fmt, cwd=work)
        assert shown.returncode == 0
        assert f"vectorize: left alone: {module}:{item_line}:" in shown.stdout
    if fix.applied:
        assert fix.verified == "exact", fix.reason
    else:  # measurably slower in this run: a timing verdict, never a changed training
        assert "slower in the training run" in fix.reason, fix.reason
    return fix.diff


def test_a_per_class_dice_loss_has_its_mask_loop_vectorized(tmp_path: Path) -> None:
    """gpuopt's own per-class Dice loss (tests/data/dice) in a tiny training: its one-hot loop
    is rewritten and checked bit for bit, its class loop left alone (.item())."""
    work = tmp_path / "dice"
    shutil.copytree(ROOT / "tests" / "data" / "dice", work)
    diff = _dice_optimized(work, "dice.py", 16, 33)
    assert "+            c = torch.arange(self.classes, device=labels.device)" in diff


def test_public_script_transunet_dice_loss(tmp_path: Path) -> None:
    """TransUNet's own DiceLoss (Beckschen/TransUNet utils.py, Apache-2.0, set up from its
    snapshot: tests/data/public.toml) in the same training: its lines kept where they are, the
    rest of utils.py (medpy, SimpleITK) blanked."""
    upstream = public_file(DATA / "public" / "transunet" / "utils.py").read_text().splitlines()
    start = upstream.index("class DiceLoss(nn.Module):")
    end = next(i for i in range(start + 1, len(upstream)) if upstream[i].startswith("def "))
    kept = ["import torch", "import torch.nn as nn"] + [""] * (start - 2) + upstream[start:end]
    work = tmp_path / "transunet"
    work.mkdir()
    (work / "utils.py").write_text("\n".join(kept) + "\n")
    driver = (DATA / "dice" / "train_dice.py").read_text()
    driver = driver.replace("from dice import ClassDice as DiceLoss", "from utils import DiceLoss")
    (work / "train_dice.py").write_text(driver)
    masks = upstream.index("        for i in range(self.n_classes):", start) + 1
    items = upstream.index("        for i in range(0, self.n_classes):", start) + 1
    diff = _dice_optimized(work, "utils.py", masks, items)
    assert "+            i = torch.arange(self.n_classes, device=input_tensor.device)" in diff
