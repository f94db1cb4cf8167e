"""Host syncs: exact counts per step at exact lines, kinds, and what is *not* a step sync."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from probes_support import PLANTED, ROOT, load, record, site

from gpuopt.probes.recorder import RecorderEngine
from gpuopt.sites import SiteResolver

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="these tests assert the CPU-only labels (would_block_on_gpu, measured_device 'cpu')",
)


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def test_three_syncs_per_step_at_three_lines(tmp_path: Path) -> None:
    mod = load("planted_syncs.py")
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    doc = record(
        lambda i: mod["train_step"](x, w),
        steps=6,
        tmp_path=tmp_path,
        window_start=1,
        window_steps=3,
    )
    got = {(e["kind"], e["site"], e["count_per_step"]) for e in doc["syncs"]}
    assert got == {
        ("item", site("planted_syncs.py", "SYNC-ITEM"), 1),
        ("bool", site("planted_syncs.py", "SYNC-BOOL"), 1),
        ("nonzero", site("planted_syncs.py", "SYNC-NONZERO"), 1),
    }
    for e in doc["syncs"]:
        assert e["would_block_on_gpu"] is True
        assert e["measured_device"] == "cpu"
        assert e["time_us_per_step"] >= 0
    assert doc["dispatch"]["window_steps"] == 3


def test_each_sync_kind_once(tmp_path: Path) -> None:
    mod = load("planted_sync_kinds.py")
    x = torch.arange(1.0, 9.0)
    doc = record(
        lambda i: mod["train_step"](x), steps=4, tmp_path=tmp_path, window_start=1, window_steps=2
    )
    name = "planted_sync_kinds.py"
    got = {(e["kind"], e["site"]): e["count_per_step"] for e in doc["syncs"]}
    assert got == {
        ("cpu", site(name, "KIND-CPU")): 1,
        ("tolist", site(name, "KIND-TOLIST")): 1,
        ("int", site(name, "KIND-INT")): 1,
        ("float", site(name, "KIND-FLOAT")): 1,
        ("print", site(name, "KIND-PRINT")): 1,
        ("nonzero", site(name, "KIND-MASK")): 1,
        ("nonzero", site(name, "KIND-MASK-SET")): 1,
        ("nonzero", site(name, "KIND-UNIQUE")): 1,
        ("bool", site(name, "KIND-BOOL")): 1,
    }


def test_library_and_data_loading_reads_are_not_step_syncs(tmp_path: Path) -> None:
    """Adam reads its step counter, the dataset calls .item() and bool(): none is the user's step
    sync on a CPU-only run. Only ``loss.item()`` is; data-loading ops are counted apart."""
    mod = load("planted_train.py")
    model, opt, loader = mod["make"]()
    it = iter(loader)
    doc = record(lambda i: mod["train_step"](model, opt, next(it)), steps=5, tmp_path=tmp_path)
    assert [(e["kind"], e["site"], e["count_per_step"]) for e in doc["syncs"]] == [
        ("item", site("planted_train.py", "LOSS-ITEM"), 1)
    ]
    d = doc["dispatch"]
    assert d["data_ops_per_step"] > 0
    # the dataset's lines belong to data loading: neither syncs nor step sites
    data_lines = {site("planted_train.py", "DATA-BOOL"), site("planted_train.py", "DATA-ITEM")}
    assert not data_lines & {s["site"] for s in d["top_sites"]}


def test_cpu_tensor_reads_are_not_syncs_when_an_accelerator_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With an accelerator present, ``.item()`` of a CPU tensor waits for nothing: not recorded.
    (The engine's accelerator flag is set directly; no GPU code path runs.)"""
    mod = load("planted_syncs.py")
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    engine = RecorderEngine(SiteResolver([PLANTED]), cpu_only=False)
    engine.turn_on()
    try:
        mod["train_step"](x, w)
    finally:
        engine.turn_off()
    engine.end_step()
    assert engine.total.syncs == {}
    assert engine.total.ops > 0
