"""Ragged batches: shapes of the batches a DataLoader yields, padding waste, per-sample loops."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import numpy as np
import pytest
import torch
from probes_support import ROOT, context, host_document, load, site

from gpuopt.findings.engine import evaluate as evaluate_profile
from gpuopt.model.profile import Profile
from gpuopt.probes.dataloader import DataLoaderProbe
from gpuopt.probes.ragged import BatchShapeTracker, batch_shapes, walked_batch_shapes
from gpuopt.probes.recorder import DispatchRecorder

NAME = "planted_ragged.py"


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def test_fixed_shapes() -> None:
    t = BatchShapeTracker()
    for step in range(5):
        t.observe((torch.zeros(8, 3, 4), torch.zeros(8)), step, detailed=True)
    s = t.summary()
    assert (s.batches, s.distinct_shapes, s.batch_size, s.variable_dims) == (
        5,
        1,
        8,
        [],
    )
    assert s.batch_size_1_variable is False and s.pad_fraction is None


def test_batch_size_one_with_variable_samples() -> None:
    t = BatchShapeTracker()
    for step, n in enumerate([3, 5, 2, 5]):
        t.observe(torch.zeros(1, n), step, detailed=False)
    s = t.summary()
    assert s.batch_size_1_variable is True
    assert (s.distinct_shapes, s.batch_sizes, s.variable_dims) == (3, [1], ["batch dim 1"])
    assert s.new_shape_share == 0.75


def test_padding_waste_exact() -> None:
    t = BatchShapeTracker()
    ids = torch.tensor([[5, 6, 7, 8], [5, 6, 0, 0]])  # 2 of 8 positions are padding
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])  # 4 of 8 are padding
    t.observe({"input_ids": ids}, 0, detailed=True)
    assert (t.summary().pad_fraction, t.summary().pad_tensor) == (0.25, "batch.input_ids")
    t2 = BatchShapeTracker()
    t2.observe({"input_ids": ids, "attention_mask": mask}, 0, detailed=True)
    assert (t2.summary().pad_fraction, t2.summary().pad_tensor) == (
        0.5,
        "batch.attention_mask",
    )
    t3 = BatchShapeTracker()
    t3.observe({"input_ids": ids}, 0, detailed=False)  # outside the window: no scan
    assert t3.summary().pad_fraction is None
    t4 = BatchShapeTracker()
    t4.observe(
        {"input_ids": torch.ones(2, 4, dtype=torch.long)}, 0, detailed=True
    )  # equal rows: not padding
    assert t4.summary().pad_fraction is None


def test_list_of_variable_samples() -> None:
    t = BatchShapeTracker()
    t.observe([torch.zeros(3), torch.zeros(5)], 0, detailed=False)
    s = t.summary()
    assert s.list_batches == 1 and s.batch_size == 2


def evaluate(doc: dict) -> list[dict]:
    """The rules on the measured parts (the rest of the document at its defaults)."""
    return msgspec.to_builtins(evaluate_profile(msgspec.convert(doc, Profile)))


def _run_loader(
    tmp_path: Path, loader, step_fn, steps: int, window_start: int = 1, window_steps: int = 2
) -> dict:  # type: ignore[no-untyped-def]
    """The DataLoader probe (which calls the batch listeners) and the recorder together."""
    count = {"n": 0}
    dl_probe = DataLoaderProbe(step_count=lambda: count["n"])
    rec = DispatchRecorder()
    ctx = context(tmp_path, window_start=window_start, window_steps=window_steps)
    dl_probe.start(ctx)
    rec.start(ctx)
    try:
        for i, batch in enumerate(loader):
            if i == steps:
                break
            step_fn(batch)
            count["n"] = i + 1
            rec.on_step(i, time.perf_counter())
    finally:
        rec.stop()
        dl_probe.stop()
    doc = host_document(rec)
    doc["dataloaders"] = msgspec.to_builtins(dl_probe.result().infos(list(range(steps))))
    return doc


def test_batch_size_one_through_a_dataloader(tmp_path: Path) -> None:
    mod = load(NAME)
    doc = _run_loader(tmp_path, mod["one_at_a_time"](), lambda b: b.float().sum(), steps=8)
    r = doc["ragged"]
    assert (r["batches"], r["distinct_shapes"], r["batch_size_1_variable"]) == (8, 8, True)
    findings = [f for f in evaluate(doc) if f["id"] == "ragged-batches"]
    assert len(findings) == 1
    assert "batch size 1 with variable-size samples" in findings[0]["title"]
    assert "8 distinct input shapes in 8 batches" in findings[0]["title"]
    assert findings[0]["est_speedup"] is None and findings[0]["estimate_model"].startswith(
        "not estimated"
    )


def test_padding_and_per_sample_loop_through_a_dataloader(tmp_path: Path) -> None:
    mod = load(NAME)
    w = torch.ones(8)
    doc = _run_loader(
        tmp_path,
        mod["padded"](4),
        lambda b: mod["per_sample_step"](b, w),
        steps=2,
        window_start=0,
        window_steps=2,
    )
    r = doc["ragged"]
    # batches of lengths [3,5,2,8] (width 8) and [4,6,7,1] (width 7): padding 14/32 and 10/28
    assert r["pad_fraction"] == round((14 + 10) / (32 + 28), 4)
    assert r["padded_batches_scanned"] == 2 and r["batch_size"] == 4
    loops = {e["site"]: e for e in doc["loops"]}
    assert loops[site(NAME, "PER-SAMPLE")]["iterations_per_step"] == 4
    findings = [f for f in evaluate(doc) if f["id"] == "ragged-batches"]
    titles = sorted(f["title"] for f in findings)
    assert titles == [
        "40.0% of the padded batch is padding",
        "Per-sample Python loop inside the step (4 iterations = batch size)",
    ]
    per_sample = next(f for f in findings if f["site"] == site(NAME, "PER-SAMPLE"))
    assert per_sample["evidence"]["batch_size"] == 4
    # the collate's own per-row loop runs in data loading: not a step loop
    assert list(loops) == [site(NAME, "PER-SAMPLE")]


@pytest.mark.parametrize(
    "batch",
    [
        (torch.zeros(4, 3, 8, 8), torch.zeros(4, dtype=torch.long)),
        [torch.zeros(4, 3), torch.zeros(4)],
        [torch.zeros(3, 5), torch.zeros(7, 5)],  # a list of variable-size samples
        [torch.zeros(2, 5), torch.zeros(2, 5)],
        [torch.tensor(1.0), torch.zeros(3)],  # a scalar first
        (np.zeros((2, 3)), np.zeros(2)),
        [torch.zeros(2), "a label"],
        {"x": torch.zeros(2, 3), "y": [torch.zeros(2), torch.zeros(2)]},
        [],
        torch.zeros(5, 2),
    ],
)
def test_batch_shapes_fast_path_reads_as_the_walk(batch: object) -> None:
    """The one-pass read of a list or tuple of tensors gives what the general walk gives."""
    fast = batch_shapes(batch)
    walked = walked_batch_shapes(batch)
    assert fast[1:] == walked[1:]

    def ids(leaves: list) -> list:
        return [(p, [id(y) for y in x] if isinstance(x, list) else id(x)) for p, x in leaves]

    assert ids(fast[0]) == ids(walked[0])
