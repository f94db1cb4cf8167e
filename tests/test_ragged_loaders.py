"""Ragged-batch statistics per DataLoader, evaluation loaders told apart (mnist's
test loader's batch size 500 stays out of the training batches' statistics)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import ROOT, marker_site, run_gpuopt

SCRIPT = ROOT / "tests" / "data" / "scripts" / "train_and_test_loaders.py"


def _line(marker: str) -> str:
    return marker_site(SCRIPT, marker)


def test_training_statistics_hold_the_training_loader_only(tmp_path: Path) -> None:
    r = run_gpuopt("profile", "--quiet", "-o", str(tmp_path), str(SCRIPT))
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "profile.json").read_text())
    ragged = doc["ragged"]
    assert ragged["batch_sizes"] == [8, 64]  # never the test loader's 128 or 44
    assert ragged["batches"] == 12  # 3 epochs x 4 training batches
    assert ragged["steps_observed"] <= doc["steps"]["count"]  # no extra "step" of test batches
    by_site = {entry["site"]: entry for entry in ragged["loaders"]}
    train, test = by_site[_line("TRAIN-LOOP")], by_site[_line("TEST-LOOP")]
    assert (train["role"], train["batches"], train["batch_sizes"]) == ("train", 12, [8, 64])
    assert (test["role"], test["batches"], test["batch_sizes"]) == ("eval", 9, [44, 128])
    roles = {d["site"]: d["role"] for d in doc["dataloaders"]}
    assert roles == {_line("TRAIN-LOOP"): "train", _line("TEST-LOOP"): "eval"}
