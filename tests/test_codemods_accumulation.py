"""``--fix accumulation``: the batch divided by k and the accumulation set to k through the
framework's settings (before/after source pairs for the HF Trainer and Lightning), k chosen from
the memory budget, the refusals, the training compared per optimizer step, the verdict by the
memory it frees (on recorded numbers), and, with Lightning installed, one ``gpuopt optimize
--fix accumulation`` end to end."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from conftest import ROOT, run_gpuopt

from gpuopt.fixes import accumulation
from gpuopt.fixes.accumulation import choose_micro_batches
from gpuopt.fixes.plan import PlanInput, PlannedFix, plan_fixes
from gpuopt.model.optimize import FixResult, Gain, OptimizeDocument
from gpuopt.model.profile import DataLoaderInfo, Profile
from gpuopt.model.records import (
    Framework,
    MemoryByCategory,
    MemoryMeasured,
    MemoryPredicted,
    MemoryReport,
    TrainingRecord,
)
from gpuopt.optimize.measure.memory import memory_change
from gpuopt.optimize.measure.policy import keep_or_drop
from gpuopt.optimize.measure.verify import compare_accumulated, per_step_losses
from gpuopt.optimize.output.render import render_text

MiB = 1 << 20

HF = """args = TrainingArguments(
    output_dir="out",
    per_device_train_batch_size=16,
    max_steps=30,
)
trainer = Trainer(model=model, args=args)
trainer.train()
"""
HF_AFTER = """args = TrainingArguments(
    output_dir="out",
    per_device_train_batch_size=4,
    max_steps=30,
    gradient_accumulation_steps=4,
)
trainer = Trainer(model=model, args=args)
trainer.train()
"""

LIT = """train = DataLoader(data, batch_size=32, shuffle=True)
trainer = L.Trainer(max_steps=60, accumulate_grad_batches=2)
trainer.fit(model, train)
"""
LIT_AFTER = """train = DataLoader(data, batch_size=8, shuffle=True)
trainer = L.Trainer(max_steps=60, accumulate_grad_batches=8)
trainer.fit(model, train)
"""


def _profile(name: str, settings: dict[str, str], memory: MemoryReport | None = None) -> Profile:
    p = Profile()
    p.environment.device = "cpu"
    p.framework = Framework(name=name, settings_at=settings)
    loader = DataLoaderInfo(
        site="t.py:1",
        cls="DataLoader",
        dataset="TensorDataset",
        batch_size=32,
        num_workers=0,
        pin_memory=False,
        persistent_workers=False,
        prefetch_factor=None,
        multiprocessing_context=None,
        epochs=1,
        batches=8,
        wait_s_total=0.0,
        wait_s_per_step=None,
    )
    loader.built_at = "t.py:1"
    p.dataloaders = [loader]
    if memory is not None:
        p.memory = memory
    return p


def _plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, p: Profile) -> PlannedFix:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text(text)
    (fix,) = [
        f
        for f in plan_fixes(PlanInput(p, ["accumulation"], False, text, "t.py"))
        if f.name == "accumulation"
    ]
    return fix


def _apply(fix: PlannedFix, text: str) -> str:
    for edit in fix.edits:
        text = edit.codemod(text, "t.py").source
    return text


def test_hf_divides_per_device_batch_and_sets_the_accumulation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fix = _plan(
        tmp_path, monkeypatch, HF, _profile("transformers", {"TrainingArguments": "t.py:1"})
    )
    assert fix.selected and fix.applicable and fix.micro_batches == 4
    assert fix.settings == {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 4}
    assert _apply(fix, HF) == HF_AFTER
    assert "batch 16 as 4 micro-batches of 4" in fix.reason and "the default" in fix.reason


def test_lightning_divides_the_loaders_batch_and_multiplies_the_accumulation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fix = _plan(tmp_path, monkeypatch, LIT, _profile("lightning", {"Trainer": "t.py:2"}))
    assert fix.settings == {"batch_size": 8, "accumulate_grad_batches": 8}
    assert _apply(fix, LIT) == LIT_AFTER  # the script's 2 times 4: the same 64 samples a step
    assert fix.sites == ["t.py:1", "t.py:2"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (LIT.replace("batch_size=32", "batch_size=args.bs"), "batch_size comes from `args.bs`"),
        (LIT.replace("batch_size=32", "**opts"), "may come from a splat"),
        (LIT.replace("batch_size=32", "batch_size=5"), "batch 5 splits into no 2 to 4"),
        (LIT.replace("accumulate_grad_batches=2", "accumulate_grad_batches=n"), "from `n`"),
        (LIT.replace("DataLoader(", "make_loader("), "no DataLoader(...) call on this line"),
    ],
)
def test_lightning_refuses_where_both_cannot_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, says: str
) -> None:
    fix = _plan(tmp_path, monkeypatch, text, _profile("lightning", {"Trainer": "t.py:2"}))
    assert not fix.applicable and not fix.edits and says in fix.reason


def test_a_plain_loop_and_other_frameworks_are_refused() -> None:
    plain = Profile()
    (fix,) = [
        f
        for f in plan_fixes(PlanInput(plain, ["accumulation"], False, None, "t.py"))
        if f.name == "accumulation"
    ]
    assert not fix.applicable and "plain loop" in fix.reason
    p = Profile(framework=Framework(name="accelerate"))
    (fix,) = [
        f
        for f in plan_fixes(PlanInput(p, ["accumulation"], False, None, "t.py"))
        if f.name == "accumulation"
    ]
    assert not fix.applicable and "HF Trainer or Lightning" in fix.reason


def _predicted(peak_mib: float, max_batch: int | None, capacity_mib: float = 100) -> MemoryReport:
    p = MemoryPredicted(
        source="fake-tensors",
        batch_size=32,
        peak_bytes=int(peak_mib * MiB),
        by_category=MemoryByCategory(),
        bytes_per_sample=MiB,
        max_batch_size=max_batch,
        margin=0.1,
        limit="",
    )
    return MemoryReport(device="gpu", capacity_bytes=int(capacity_mib * MiB), predicted=p)


def test_k_is_the_fewest_micro_batches_that_fit_else_the_default() -> None:
    assert choose_micro_batches(32, None).k == 4  # no budget
    assert "no memory budget" in choose_micro_batches(32, None).why
    assert choose_micro_batches(32, _predicted(50, 64)).k == 4  # fits already
    assert "fits already" in choose_micro_batches(32, _predicted(50, 64)).why
    assert choose_micro_batches(32, _predicted(95, 20)).k == 2  # 16 fits
    assert choose_micro_batches(32, _predicted(95, 10)).k == 4  # 8 fits, 16 does not
    assert choose_micro_batches(6, None).k == 3  # the largest divisor up to the default
    measured = MemoryReport(  # on a GPU: the activations scaled with the batch
        device="gpu",
        capacity_bytes=80 * MiB,
        measured=MemoryMeasured(
            peak_allocated_bytes=90 * MiB,
            peak_reserved_bytes=90 * MiB,
            by_category=MemoryByCategory(activations=64 * MiB),
            batch_size=32,
        ),
    )
    on_gpu = choose_micro_batches(32, measured)  # 26 MiB fixed, 2 MiB a sample: 23 fit
    assert on_gpu.k == 2 and "up to batch 23 fits" in on_gpu.why and "measured" in on_gpu.why
    none = choose_micro_batches(32, _predicted(99, 4))
    assert none.k is None and "accumulation alone cannot make it fit" in none.why


def test_at_most_as_many_micro_batches_as_the_memory_recording_keeps_whole() -> None:
    from gpuopt.memory.capture import MAX_BOUNDARIES

    assert accumulation.MAX_MICRO_BATCHES == MAX_BOUNDARIES


def _with_peak(memory: MemoryReport) -> Profile:
    return Profile(memory=memory)


@pytest.mark.parametrize(
    ("before", "after", "verdict"),
    [(95, 80, "fits"), (80, 60, "frees"), (80, 79.5, "no-gain"), (80, 90, "more")],
)
def test_the_verdict_is_the_peak_it_frees(before: float, after: float, verdict: str) -> None:
    change = memory_change(_with_peak(_predicted(before, 8)), _with_peak(_predicted(after, 8)))
    assert change.verdict == verdict
    assert change.before_bytes == int(before * MiB) and change.after_bytes == int(after * MiB)
    assert change.usable_bytes == int(90 * MiB) and change.source == "predicted"
    assert f"{-(before - after) / before:+.1%}" in change.label


def test_no_peak_or_another_source_is_no_verdict() -> None:
    none = memory_change(Profile(), _with_peak(_predicted(50, 8)))
    assert none.verdict == "not-measured" and "--memory-for DEVICE" in none.label
    measured = MemoryReport(
        device="gpu",
        capacity_bytes=100 * MiB,
        measured=MemoryMeasured(
            peak_allocated_bytes=70 * MiB,
            peak_reserved_bytes=80 * MiB,
            step_peaks_bytes=[60 * MiB, 65 * MiB],
        ),
    )
    mixed = memory_change(_with_peak(measured), _with_peak(_predicted(50, 8)))
    assert mixed.verdict == "not-measured" and "not compared" in mixed.label
    same = memory_change(_with_peak(measured), _with_peak(measured))
    assert same.before_bytes == 65 * MiB and same.verdict == "no-gain"  # the steps' own peaks


def test_a_slower_memory_fix_stays_its_speed_a_cost() -> None:
    slower = Gain(speedup=0.4, low=0.35, high=0.45, measurable=True, label="2.5x slower")
    slower.verdict = "slower"
    assert keep_or_drop(accumulation.KIND, slower, on_gpu=False, named=True).drop is None


def test_micro_batch_losses_are_compared_per_step() -> None:
    base = TrainingRecord(losses=[1.0, 0.9, 0.8], param_digest="a")
    divided = TrainingRecord(losses=[0.25] * 4 + [0.225] * 4 + [0.2001] * 4, param_digest="b")
    v = compare_accumulated(base, [], divided, 4, accumulation.TOLERANCE)
    assert v.verified == "tolerance" and "summed" in v.detail and v.steps_compared == 3
    averaged = TrainingRecord(losses=[1.0] * 4 + [0.9] * 3, param_digest="b")  # one short step
    v = compare_accumulated(base, [], averaged, 4, accumulation.TOLERANCE)
    assert v.verified == "tolerance" and "averaged" in v.detail and v.steps_compared == 1
    off = TrainingRecord(losses=[0.25] * 4 + [0.3] * 4, param_digest="b")
    assert compare_accumulated(base, [], off, 4, accumulation.TOLERANCE).verified == "failed"
    assert per_step_losses([1, 2, 3, 4, 5], 2) == [3, 7]


def test_the_report_says_the_memory_and_the_samples_per_second_it_costs() -> None:
    f = FixResult(id="accumulation", mode="source", applied=True, verified="tolerance")
    f.gain_detail = Gain(speedup=0.4, low=0.35, high=0.45, measurable=True, label="2.50x slower")
    f.memory = memory_change(_with_peak(_predicted(95, 8)), _with_peak(_predicted(80, 8)))
    text = render_text(OptimizeDocument(script="t.py", fixes=[f]))
    assert "peak -16%, samples/s 0.40x" in text
    assert "accumulation: memory: fits now: peak 95.0 MiB -> 80.0 MiB (-15.8%)" in text
    assert "samples/s, its cost: 2.50x slower" in text


SCRIPT = ROOT / "benchmarks" / "frameworks" / "lightning_autoencoder.py"


@pytest.mark.slow
def test_optimize_accumulation_on_the_lightning_autoencoder(tmp_path: Path) -> None:
    """Batch 1000 does not fit 84 MiB (the H100's cuBLAS workspaces alone are 64 MiB): two
    micro-batches of 500 do; the same training (no dropout, no BatchNorm) within rounding."""
    if importlib.util.find_spec("lightning") is None:
        pytest.skip("lightning is not installed")
    script = tmp_path / "ae.py"
    text = SCRIPT.read_text().replace(
        "batch_size=32, shuffle=True", "batch_size=1000, shuffle=True"
    )
    script.write_text(text)
    out = tmp_path / "out"
    args = ("optimize", "--fix", "accumulation", "--memory-for", "84MiB", "--quick")
    env = {"PYTHONPATH": str(ROOT / "benchmarks" / "corpus" / "shim"), "OMP_NUM_THREADS": "1"}
    r = run_gpuopt(
        *args, "--steps", "6", "-o", str(out), "ae.py", cwd=tmp_path, env=env, timeout=900
    )
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((out / "optimize.json").read_text())
    (fix,) = [f for f in doc["fixes"] if f["id"] == "accumulation"]
    assert fix["applied"] and fix["settings"] == {"batch_size": 500, "accumulate_grad_batches": 2}
    assert fix["verified"] == "tolerance" and "micro-batches a step" in fix["reason"]
    memory = fix["memory"]
    assert memory["verdict"] == "fits" and memory["source"] == "predicted"
    assert memory["before_bytes"] > memory["usable_bytes"] >= memory["after_bytes"]
    assert "samples/s" in r.stderr and "memory: fits now" in r.stderr
    assert "batch_size=500" in r.stdout and "accumulate_grad_batches=2" in r.stdout
    labels = [run["label"] for run in doc["runs"]]
    assert labels[-1] == "candidate memory"
