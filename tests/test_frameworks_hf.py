"""The HF Trainer and accelerate seen through (docs/frameworks.md): a framework's own host reads
counted with its line and the setting that removes them, that setting changed where the script
sets it, and the DataLoader the Trainer builds said to be set at TrainingArguments(...). The
unit tests need no framework; the runs need transformers (a test dependency, not gpuopt's)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
from conftest import ROOT, run_gpuopt

from gpuopt.findings.rules.host_syncs import sync_in_step
from gpuopt.fixes.framework_knobs import rewrite_framework_call
from gpuopt.fixes.plan import PlanInput, plan_fixes
from gpuopt.frameworks.detect import (
    FrameworkFiles,
    knob_for_read,
    loader_origins,
    package_path,
    seen_on_stack,
    settings_sites,
    spec_named,
    specs,
)
from gpuopt.model.profile import Environment, Finding, Profile
from gpuopt.model.records import DataLoaderInfo, Framework, FrameworkPhase, Sync, given

HF_SCRIPT = ROOT / "benchmarks" / "frameworks" / "hf_clm_gpt2.py"

TRAINER_LIKE = """\
class Trainer:
    def step(self, loss):
        if (
            self.args.logging_nan_inf_filter
            and (torch.isnan(loss) or torch.isinf(loss))
        ):
            return 0
        return loss.item()
"""


def test_every_registered_framework_has_a_spec_with_knobs_and_evidence() -> None:
    names = [s.name for s in specs()]
    assert names[:2] == ["transformers", "accelerate"]
    for spec in specs():
        assert spec.packages and spec.knobs
        assert all(k.evidence and k.call and k.argument for k in spec.knobs)
    hf = spec_named("transformers")
    assert hf is not None
    training = {k.argument for k in hf.knobs if k.changes_training}
    assert {"bf16", "gradient_accumulation_steps"} <= training
    assert "logging_nan_inf_filter" not in training


def test_the_setting_guarding_a_read_is_its_knob(tmp_path: Path) -> None:
    f = tmp_path / "trainer.py"
    f.write_text(TRAINER_LIKE)
    hf = spec_named("transformers")
    assert hf is not None
    knob = knob_for_read(hf, str(f), 3)  # the `if (` line, where Python places the read
    assert knob is not None and knob.argument == "logging_nan_inf_filter"
    assert knob.value == "False"
    assert knob_for_read(hf, str(f), 8) is None  # loss.item(): no setting guards it


def test_the_settings_call_is_found_in_the_users_files(tmp_path: Path) -> None:
    f = tmp_path / "train.py"
    f.write_text("import transformers\n\nargs = transformers.TrainingArguments(\n    'out',\n)\n")
    found = settings_sites([str(f)], ["TrainingArguments", "Accelerator"], lambda p: "train.py")
    assert found == {"TrainingArguments": "train.py:3"}


def test_an_installed_package_file_is_named_from_its_package() -> None:
    path = "/v/lib/python3.11/site-packages/transformers/trainer.py"
    assert package_path(path) == "transformers/trainer.py"
    assert package_path("/home/me/train.py") == "/home/me/train.py"


def test_the_outermost_framework_frame_and_the_users_line_are_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = tmp_path / "site-packages" / "accelerate"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    fake = types.ModuleType("accelerate")
    fake.__file__ = str(pkg / "__init__.py")
    monkeypatch.setitem(sys.modules, "accelerate", fake)
    lib = pkg / "optimizer.py"
    lib.write_text("class AcceleratedOptimizer:\n    def step(self, f):\n        return f()\n")
    user = tmp_path / "train.py"
    user.write_text("def main(opt, f):\n    return opt.step(f)\n")
    ns: dict[str, object] = {}
    exec(compile(lib.read_text(), str(lib), "exec"), ns)
    un: dict[str, object] = {}
    exec(compile(user.read_text(), str(user), "exec"), un)
    files = FrameworkFiles()

    def look() -> object:
        return seen_on_stack(
            sys._getframe(1),
            files,
            lambda p: p == str(user),
            lambda f: f"train.py:{f.f_lineno}",
        )

    seen = un["main"](ns["AcceleratedOptimizer"](), look)  # type: ignore[operator]
    assert seen is not None
    assert (seen.spec.name, seen.entry) == ("accelerate", "train.py:2")
    assert seen.function == "AcceleratedOptimizer.step"
    assert seen_on_stack(sys._getframe(), files, lambda p: False, str) is None


CALL = """\
args = TrainingArguments(
    output_dir=out,
    logging_steps=10,
    report_to="none",
)
"""


def test_the_codemod_adds_the_keyword_in_the_calls_layout() -> None:
    r = rewrite_framework_call(CALL, 1, "TrainingArguments", {"logging_nan_inf_filter": "False"})
    assert r.changed
    assert r.source == CALL.replace(
        '    report_to="none",\n', '    report_to="none",\n    logging_nan_inf_filter=False,\n'
    )


def test_the_codemod_replaces_a_literal_and_leaves_an_expression() -> None:
    text = "a = TrainingArguments('o', logging_nan_inf_filter=True, dataloader_num_workers=n)\n"
    r = rewrite_framework_call(
        text,
        1,
        "TrainingArguments",
        {"logging_nan_inf_filter": "False", "dataloader_num_workers": "4"},
    )
    assert "logging_nan_inf_filter=False" in r.source
    assert "dataloader_num_workers=n" in r.source
    (skip,) = r.skipped
    assert "comes from `n`" in skip.reason
    missing = rewrite_framework_call(text, 2, "TrainingArguments", {"bf16": "True"})
    assert not missing.changed and "no TrainingArguments(...) call" in missing.skipped[0].reason


def _hf_profile() -> Profile:
    common = {
        "kind": "bool",
        "site": "train.py:63",
        "measured_device": "cpu",
        "would_block_on_gpu": True,
        "scope": "train.py:40",
        "scope_kind": "function",
        "framework": "transformers",
    }
    return Profile(
        environment=Environment(device="cpu"),
        framework=Framework(
            name="transformers",
            entry="train.py:63",
            settings_at={"TrainingArguments": "train.py:45"},
        ),
        syncs=[
            Sync(
                count_per_step=2,
                library_site="transformers/trainer.py:1911",
                library_function="Trainer._run_epoch",
                knob="logging_nan_inf_filter",
                **common,
            ),
            Sync(
                count_per_step=1,
                library_site="transformers/masking_utils.py:307",
                library_function="_ignore_causal_mask_sdpa",
                **common,
            ),
        ],
    )


def test_a_frameworks_reads_are_a_finding_with_its_line_the_users_and_the_knob() -> None:
    found = sync_in_step(_hf_profile())
    assert len(found) == 2
    knobbed = next(f for f in found if "knob" in f.evidence)
    assert knobbed.site == "train.py:63"
    assert knobbed.evidence["library_sites"] == {"transformers/trainer.py:1911": 2}
    assert knobbed.evidence["knob"]["site"] == "train.py:45"  # type: ignore[index]
    assert "TrainingArguments(logging_nan_inf_filter=False) at train.py:45" in knobbed.fix
    assert "would block on a GPU" in knobbed.title and "transformers' code" in knobbed.title
    other = next(f for f in found if "knob" not in f.evidence)
    assert "no setting of the framework removes them" in other.fix


def test_optimize_plans_the_knob_on_the_settings_call_not_the_syncs_rewrite() -> None:
    profile = _hf_profile()
    profile.findings = sync_in_step(profile)
    fixes = {f.name: f for f in plan_fixes(PlanInput(profile, [], False, None, "train.py"))}
    assert "syncs" not in fixes  # the user's line only calls trainer.train()
    knobs = fixes["framework-knobs"]
    assert knobs.selected and knobs.applicable
    assert knobs.sites == ["train.py:45"]
    assert knobs.settings == {"logging_nan_inf_filter": "False"}
    (edit,) = knobs.edits
    assert (edit.path, edit.lines) == ("train.py", [45])


def test_a_knob_that_changes_training_is_planned_only_when_named() -> None:
    knob = {
        "call": "TrainingArguments",
        "argument": "bf16",
        "value": "True",
        "site": "train.py:45",
        "changes_training": True,
    }
    evidence = {"knob": knob, "library_sites": {"transformers/trainer.py:1": 1}}
    f = Finding(id="sync-in-step", severity="low", title="t", evidence=evidence, fix="f")
    profile = Profile(findings=[f], environment=Environment(device="cpu"))
    (fix,) = plan_fixes(PlanInput(profile, [], False, None, "train.py"))
    assert fix.name == "framework-knobs"
    assert not fix.applicable and "--fix framework-knobs" in fix.notes[0]
    (named,) = plan_fixes(PlanInput(profile, ["framework-knobs"], False, None, "train.py"))
    assert named.selected and named.settings == {"bf16": "True"}


def _library_reads(doc: dict[str, object]) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in doc["syncs"]:  # type: ignore[attr-defined]
        if s.get("library_site"):
            out[s["library_site"].split(":")[0]] = s["count_per_step"]
    return out


@pytest.mark.slow
def test_the_hf_trainer_is_seen_through_and_its_knob_removes_its_reads(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    out = tmp_path / "run"
    r = run_gpuopt(
        "profile", "--quiet", "-o", str(out), "--steps", "8", str(HF_SCRIPT), "8", timeout=900
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "profile.json").read_text())
    fw = doc["framework"]
    rel = str(HF_SCRIPT.relative_to(ROOT))
    text = HF_SCRIPT.read_text().splitlines()
    train_line = next(i for i, t in enumerate(text, 1) if "trainer.train()" in t)
    args_line = next(i for i, t in enumerate(text, 1) if "TrainingArguments(" in t and "=" in t)
    assert fw["name"] == "transformers" and fw["entry"] == f"{rel}:{train_line}"
    assert fw["settings_at"] == {"TrainingArguments": f"{rel}:{args_line}"}
    assert fw["phases"][0] == {"name": "train", "steps": 8}
    assert _library_reads(doc) == {"transformers/trainer.py": 2, "transformers/masking_utils.py": 1}
    (loader,) = doc["dataloaders"]
    assert loader["built_at"] == f"{rel}:{args_line}"
    assert loader["settings_call"] == "TrainingArguments"
    (knobbed,) = [f for f in doc["findings"] if "knob" in f["evidence"]]
    assert knobbed["evidence"]["knob"]["argument"] == "logging_nan_inf_filter"

    fixed = tmp_path / "hf_clm_gpt2.py"
    rewrite = rewrite_framework_call(
        HF_SCRIPT.read_text(), args_line, "TrainingArguments", {"logging_nan_inf_filter": "False"}
    )
    fixed.write_text(rewrite.source)
    after = tmp_path / "after"
    r = run_gpuopt(
        "profile", "--quiet", "-o", str(after), "--steps", "8", str(fixed), "8", timeout=900
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((after / "profile.json").read_text())
    assert _library_reads(doc) == {"transformers/masking_utils.py": 1}


def _loader(built_at: str, built_in: list[str] | None = None) -> DataLoaderInfo:
    return DataLoaderInfo(
        built_in=built_in or [],
        site="t.py:63",
        cls="DataLoader",
        dataset="Blocks",
        batch_size=8,
        num_workers=0,
        pin_memory=True,
        persistent_workers=False,
        prefetch_factor=None,
        multiprocessing_context=None,
        epochs=1,
        batches=8,
        wait_s_total=0.0,
        wait_s_per_step=0.0,
        built_at=built_at,
    )


def test_a_loader_the_trainer_builds_is_set_at_training_arguments() -> None:
    fw = Framework(
        name="transformers",
        entry="t.py:63",
        settings_at={"TrainingArguments": "t.py:45"},
        phases=[FrameworkPhase(name="train", steps=30)],
    )
    trainer_built, own = _loader("t.py:63"), _loader("t.py:20")
    evals = _loader("t.py:63", ["Trainer._get_dataloader", "Trainer.get_eval_dataloader"])
    loader_origins(fw, [trainer_built, own, evals])
    assert (trainer_built.built_at, trainer_built.built_via) == ("t.py:45", "t.py:63")
    assert trainer_built.settings_call == "TrainingArguments"
    assert own.built_at == "t.py:20" and given(own.settings_call) is None
    assert given(evals.role) == "eval" and given(trainer_built.role) is None
    assert [(p.name, p.steps) for p in fw.phases] == [("train", 30), ("eval", 8)]


def test_a_frozen_module_is_named_as_python_names_it(tmp_path: Path) -> None:
    from gpuopt.assemble.host_summary import _frame_label
    from gpuopt.sites import SiteResolver

    code = compile("x = 1\n", "<frozen importlib._bootstrap_external>", "exec")
    label = _frame_label(SiteResolver([tmp_path], cwd=str(tmp_path)), code, 0)
    assert label.startswith("<frozen importlib._bootstrap_external>:")
    assert label.endswith(" (<module>)") and str(tmp_path) not in label


FAKE_FRAMEWORK = """\
import torch


def check(loss):
    if torch.isnan(loss):
        return False
    return True
"""

FAKE_SCRIPT = """\
import torch
import accelerate

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(16, 8)
for step in range(10):
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    accelerate.check(loss.detach())  # framework call
"""


@pytest.mark.slow
def test_a_frameworks_read_is_counted_on_a_cpu_run_without_the_framework(tmp_path: Path) -> None:
    """A stand-in package named like a registered framework, installed outside the script's
    folder: its read of the loss inside the step is counted, with its line and the script's."""
    pkg = tmp_path / "site-packages" / "accelerate"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from accelerate.loop import check\n")
    (pkg / "loop.py").write_text(FAKE_FRAMEWORK)
    proj = tmp_path / "proj"
    proj.mkdir()
    script = proj / "train.py"
    script.write_text(FAKE_SCRIPT)
    out = tmp_path / "run"
    r = run_gpuopt(
        "profile",
        "--quiet",
        "-o",
        str(out),
        "train.py",
        cwd=proj,
        env={"PYTHONPATH": str(tmp_path / "site-packages")},
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "profile.json").read_text())
    (read,) = [s for s in doc["syncs"] if s.get("library_site")]
    assert read["library_site"] == "accelerate/loop.py:5"
    assert read["site"] == "train.py:12" and read["framework"] == "accelerate"
    assert read["count_per_step"] == 1 and read["would_block_on_gpu"] is True
    # the steps end in the script's own loop, not inside the framework: a plain loop
    assert doc["framework"] is None


def test_an_opt_in_fix_asked_by_name_goes_through_the_trainers_setting() -> None:
    profile = Profile(
        environment=Environment(device="cpu"),
        framework=Framework(name="transformers", settings_at={"TrainingArguments": "t.py:45"}),
    )
    fixes = {
        f.name: f for f in plan_fixes(PlanInput(profile, ["amp", "compile"], False, None, "t.py"))
    }
    amp, compiled = fixes["amp"], fixes["compile"]
    assert amp.selected and amp.settings == {"bf16": "True"} and not amp.model_transforms
    assert compiled.selected and compiled.settings == {"torch_compile": "True"}
    (edit,) = amp.edits
    assert (edit.path, edit.lines) == ("t.py", [45])
    rewritten = edit.codemod("\n" * 44 + "args = TrainingArguments(\n    'o',\n)\n", "t.py")
    assert "bf16=True" in rewritten.source
    plain = Profile(environment=Environment(device="cpu"))
    (own,) = plan_fixes(PlanInput(plain, ["amp"], False, None, "t.py"))
    assert own.model_transforms == ["bf16_autocast"]  # a plain loop: gpuopt's run-time form
