"""What gpuopt says and plans through each framework's own settings, with no framework installed:
the framework-bound finding in each framework's words, timm's command-line flags for its
DataLoader, the settings that change the training (precision, accumulation) planned only when
their fix is named, the memory findings naming them, and Lightning's logged-value reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gate_support import run

from gpuopt.findings.engine import evaluate as findings_of
from gpuopt.findings.rules.framework import framework_bound
from gpuopt.findings.rules.host_syncs import sync_in_step
from gpuopt.fixes.plan import PlanInput, plan_fixes
from gpuopt.model.document import empty_profile
from gpuopt.model.profile import DataLoaderInfo, Finding, Profile
from gpuopt.model.records import Framework, FrameworkPhase, Sync

SETTINGS = {
    "transformers": {"TrainingArguments": "t.py:45"},
    "accelerate": {"Accelerator": "t.py:33"},
    "lightning": {"Trainer": "t.py:9"},
    "timm": {},
}


def _fw(name: str, share: float | None = None) -> Framework:
    return Framework(
        name=name,
        version="1.0",
        entry="t.py:63",
        phases=[FrameworkPhase(name="train", steps=30)],
        python_share=share,
        settings_at=dict(SETTINGS[name]),
    )


def _bound(name: str) -> Finding:
    p = empty_profile("t.py", [])
    p.framework = _fw(name, 0.5)
    (f,) = framework_bound(p)
    return f


def test_framework_bound_on_the_hf_trainer_names_the_trainers_own_knobs() -> None:
    f = _bound("transformers")
    assert "progress bar" in f.title and "Trainer's loop" in f.title
    assert "TrainingArguments(disable_tqdm=True) at t.py:45" in f.fix
    assert "logging_steps" in f.fix and "per_device_train_batch_size" in f.fix
    assert "enable_progress_bar" not in f.fix and "self.log" not in f.fix
    assert f.site == "t.py:45"
    assert f.fix_params == {
        "framework": "transformers",
        "call": "TrainingArguments",
        "disable_tqdm": "True",
    }


def test_framework_bound_on_accelerate_and_timm_speaks_of_their_own_code() -> None:
    acc = _bound("accelerate")
    assert "optimizer, backward and DataLoader wrappers" in acc.title
    assert "accelerator.gather_for_metrics" in acc.fix and "Trainer" not in acc.fix
    assert acc.fix_params == {"framework": "accelerate"}  # no setting removes it: nothing planned
    timm = _bound("timm")
    assert "--batch-size" in timm.fix and "--log-interval" in timm.fix
    assert "Trainer" not in timm.fix and "progress bar" not in timm.title


def test_framework_bound_on_lightning_keeps_its_progress_bar_and_logging() -> None:
    f = _bound("lightning")
    assert "hooks, closure, logging, progress bar" in f.title
    assert "Trainer(enable_progress_bar=False) at t.py:9" in f.fix
    assert "self.log(..., on_step=False)" in f.fix and "log_every_n_steps" in f.fix


def _loader_bound(name: str, device: str = "cpu") -> Finding:
    p = run([0.02] * 32)
    for r in p.steps.series[2:]:
        r.data_wait_s = 0.6 * 0.02
    p.breakdown.data_wait = 0.6
    p.environment.device = device
    p.environment.cpu_count = 16
    p.dataloaders = [
        DataLoaderInfo(
            site="train.py:1120",
            cls="DataLoader",
            dataset="ImageDataset",
            batch_size=8,
            num_workers=0,
            pin_memory=False,
            persistent_workers=False,
            prefetch_factor=None,
            multiprocessing_context=None,
            epochs=1,
            batches=30,
            wait_s_total=0.36,
            wait_s_per_step=0.012,
            built_at="train.py:800",
        )
    ]
    p.framework = _fw(name)
    (f,) = findings_of(p, only={"dataloader-bound"})
    return f


def test_a_timm_loader_is_fixed_with_train_pys_flags_on_the_command_line() -> None:
    f = _loader_bound("timm")
    assert f.fix.startswith("Add --workers ")
    assert "to the command line" in f.fix and "on a GPU --pin-mem too" in f.fix
    assert "DataLoader(" not in f.fix and "train.py:800" not in f.fix
    assert f.evidence["settings_call"] == "command line"
    assert f.evidence["flags"][0] == f"--workers {f.fix_params['num_workers']}"
    gpu = _loader_bound("timm", device="cuda")
    assert "--pin-mem" in gpu.evidence["flags"] and "on a GPU" not in gpu.fix
    plain = _loader_bound("lightning")  # a loader the script builds: its own DataLoader(...)
    assert plain.fix.startswith("DataLoader(") and "flags" not in plain.evidence


def _planned(name: str, chosen: list[str], findings: list[Finding] | None = None) -> Any:
    p = Profile(findings=findings or [])
    p.environment.device = "cpu"
    p.framework = _fw(name)
    return {f.name: f for f in plan_fixes(PlanInput(p, chosen, False, None, "t.py"))}


@pytest.mark.parametrize(
    ("name", "setting"),
    [
        ("lightning", {"precision": '"bf16-mixed"'}),
        ("transformers", {"bf16": "True"}),
        ("accelerate", {"mixed_precision": '"bf16"'}),
    ],
)
def test_amp_named_goes_through_the_frameworks_precision(name: str, setting: dict) -> None:
    amp = _planned(name, ["amp"])["amp"]
    assert amp.selected and amp.applicable and amp.settings == setting
    assert amp.model_transforms == [] and amp.edits[0].path == "t.py"


def test_accumulation_is_planned_by_its_own_fix_and_only_when_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the one knob the framework route sets: both settings, by the fix's own planner
    (tests/test_codemods_accumulation.py holds its forms)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("\n" * 44 + "args = TrainingArguments(output_dir='o')\n")
    memory = Finding(id="activation-memory", severity="medium", title="t", evidence={}, fix="f")
    listed = _planned("transformers", [], [memory])["accumulation"]
    assert listed.applicable and not listed.selected
    assert "only with --fix accumulation" in listed.reason
    named = _planned("transformers", ["accumulation"])["accumulation"]
    assert named.selected and named.settings == {
        "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 4,
    }
    plain = Profile(findings=[memory])
    (none,) = [
        f
        for f in plan_fixes(PlanInput(plain, ["accumulation"], False, None, "t.py"))
        if f.name == "accumulation"
    ]
    assert not none.applicable and "framework's own settings" in none.reason


def test_timms_own_flag_is_said_beside_gpuopts_form() -> None:
    amp = _planned("timm", ["amp"])["amp"]
    assert amp.selected and amp.model_transforms  # gpuopt's run-time form: train.py as it is
    assert any("--amp on the command line" in n for n in amp.notes)


def test_activation_memory_names_the_frameworks_precision_and_accumulation() -> None:
    from gpuopt.findings.rules import memory

    said = memory._through_framework(Profile(framework=_fw("transformers")))
    assert "TrainingArguments(bf16=True) at t.py:45" in said and "--fix amp" in said
    assert "TrainingArguments(gradient_accumulation_steps=4)" in said
    assert "--fix accumulation" in said and "GPU" in said
    timm = memory._through_framework(Profile(framework=_fw("timm")))
    assert "the flag --amp on the command line" in timm and "accumulation" not in timm
    assert memory._through_framework(Profile()) == ""


def test_lightnings_logged_value_reads_name_the_users_self_log() -> None:
    p = run([0.01] * 12)
    p.framework = _fw("lightning")
    p.syncs = [
        Sync(
            kind="item",
            site="t.py:66",
            count_per_step=4,
            framework="lightning",
            library_site="lightning/fabric/utilities/apply_func.py:134",
            library_function="convert_tensors_to_scalars.<locals>.to_item",
        )
    ]
    (f,) = [f for f in sync_in_step(p) if f.evidence.get("framework") == "lightning"]
    assert "prog_bar=False" in f.fix and "no setting of the framework" not in f.fix


@pytest.mark.parametrize("name", ["detect", "frames", "no_such", "../x", ""])
def test_a_documents_unknown_framework_name_has_no_spec(name: str) -> None:
    from gpuopt.findings.rules.framework import spec_module

    assert spec_module(name) is None
    p = empty_profile("t.py", [])
    p.framework = Framework(name=name, python_share=0.5)
    (f,) = framework_bound(p)  # still said, in general words, never a crash
    assert "larger batch" in f.fix and f.fix_params == {"framework": name}
