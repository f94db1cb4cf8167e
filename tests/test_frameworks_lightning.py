"""Lightning seen through (gpuopt.frameworks; timm: tests/test_frameworks_timm.py): whose code a
frame is, the loop's phase, the Trainer(...) call, the framework-bound finding, its codemod and
plan; and, with Lightning installed, a profile of a LightningModule: its framework key, its
phases and the memory of its training step (not of the validation sanity check)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import ROOT, marker_site, run_gpuopt

from gpuopt.findings.rules.framework import framework_bound
from gpuopt.fixes.framework_knobs import rewrite_call_keywords
from gpuopt.fixes.plan import PlanInput, plan_fixes
from gpuopt.frameworks import frames, lightning
from gpuopt.model.document import empty_profile
from gpuopt.model.records import Framework, FrameworkPhase

SCRIPT = ROOT / "benchmarks" / "frameworks" / "lightning_autoencoder.py"
SHIM = ROOT / "benchmarks" / "corpus" / "shim"


def _stack_in(path: str, func: str, inner: Any) -> Any:
    """Call ``inner`` from a function named ``func`` whose code says it lives in ``path``."""
    scope: dict[str, Any] = {}
    src = f"def {func}(inner):\n    return inner()\n"
    exec(compile(src, path, "exec"), scope)
    return scope[func](inner)


def test_phase_of_names_the_sanity_check_over_the_evaluation_loop_inside_it() -> None:
    table = lightning.PHASES
    here = lambda: frames.phase_of(sys._getframe(), table)  # noqa: E731
    evaluation = lambda: _stack_in(  # noqa: E731
        "/x/lightning/pytorch/loops/evaluation_loop.py", "run", here
    )
    assert _stack_in("/x/lightning/pytorch/loops/fit_loop.py", "run", here) == "train"
    assert evaluation() == "validation"
    sanity = _stack_in("/x/lightning/pytorch/trainer/trainer.py", "_run_sanity_check", evaluation)
    assert sanity == "sanity-check"
    assert here() is None


def test_owners_split_framework_user_torch_and_the_rest(tmp_path: Path) -> None:
    fw_dir = os.path.join(str(tmp_path / "site" / "lightning"), "")
    owners = frames.Owners(
        [(fw_dir, "lightning")], "/t/torch/", lambda f: f.startswith(str(tmp_path / "user"))
    )
    assert owners.owner(fw_dir + "pytorch/loops/fit_loop.py") == "lightning"
    assert owners.owner("/t/torch/optim/adam.py") == frames.TORCH
    assert owners.owner(str(tmp_path / "user" / "train.py")) == frames.USER
    assert owners.owner("/usr/lib/python3.11/logging/__init__.py") == frames.OTHER
    # the standard library runs on its caller's behalf
    stack = ["/usr/lib/python3.11/logging/__init__.py", fw_dir + "core/module.py"]
    assert owners.stack_owner(stack) == "lightning"
    split = frames.python_split(
        {((1, 0),): 0.003, ((2, 0),): 0.001},
        {1: _code_in(fw_dir + "a.py"), 2: _code_in(str(tmp_path / "user" / "t.py"))},
        owners,
    )
    assert split == {"lightning": 0.003, frames.USER: 0.001}


def _code_in(path: str) -> Any:
    return compile("x = 1", path, "exec")


def test_call_line_takes_the_last_trainer_before_the_entry() -> None:
    src = (
        "import lightning as L\n"
        "a = L.Trainer(max_steps=1)\n"
        "b = pl.Trainer()\n"
        "a.fit(m)\n"
        "c = Trainer()\n"
    )
    assert frames.call_line(src, lightning.CALLS, before=4) == 3
    assert frames.call_line(src, lightning.CALLS, before=1) == 2
    assert frames.call_line("x = (", lightning.CALLS) is None
    assert frames.call_line("f()", lightning.CALLS) is None


def test_recognise_reads_sys_modules_without_importing() -> None:
    class Mod:
        __version__ = "2.6.6"

    assert lightning.recognise({"lightning": Mod()}) == Framework(name="lightning", version="2.6.6")
    assert lightning.recognise({}) is None


def test_codemod_sets_replaces_and_refuses_on_the_trainer_line() -> None:
    src = (
        "import lightning as L\n"
        "t = L.Trainer(max_steps=60,\n"
        "              logger=False)\n"
        "u = Trainer(enable_progress_bar=True)\n"
        "v = Trainer(enable_progress_bar=args.bar)\n"
        "w = Trainer(**kw)\n"
    )
    out = rewrite_call_keywords(src, [2, 4], "Trainer", {"enable_progress_bar": "False"})
    # one argument a line: the new one on a line of its own, indented as the others
    assert "logger=False,\n              enable_progress_bar=False)" in out.source
    assert "u = Trainer(enable_progress_bar=False)" in out.source
    assert out.notes == [
        "line 2: Trainer(enable_progress_bar=False)",
        "line 4: Trainer(enable_progress_bar=False)",
    ]
    kept = rewrite_call_keywords(src, [5, 6, 1], "Trainer", {"enable_progress_bar": "False"})
    assert kept.source == src
    reasons = sorted(s.reason for s in kept.skipped)
    assert reasons == [
        "enable_progress_bar comes from `args.bar`: set it to False there",
        "enable_progress_bar may come from the **kwargs splat",
        "no Trainer(...) call on this line",
    ]


def _profile(share: float | None, knobs_site: str | None = "t.py:9") -> Any:
    p = empty_profile("t.py", [])
    fw = Framework(
        name="lightning",
        version="2.6.6",
        entry="t.py:12",
        phases=[FrameworkPhase(name="train", steps=60)],
        python_share=share,
    )
    if knobs_site:
        fw.knobs_site = knobs_site
    p.framework = fw
    return p


def test_framework_bound_fires_on_a_large_share_and_names_the_trainer_call() -> None:
    (f,) = framework_bound(_profile(0.49))
    assert f.id == "framework-bound" and f.severity == "high"
    assert f.site == "t.py:9"
    assert "enable_progress_bar=False" in f.fix and "t.py:9" in f.fix
    assert f.fix_params == {
        "framework": "lightning",
        "call": "Trainer",
        "enable_progress_bar": "False",
    }
    assert framework_bound(_profile(0.1)) == []
    assert framework_bound(_profile(None)) == []
    (bare,) = framework_bound(_profile(0.3, knobs_site=None))
    assert bare.site == "t.py:12" and bare.fix_params == {"framework": "lightning"}


def test_plan_rewrites_the_trainer_call_the_finding_names() -> None:
    p = _profile(0.49)
    p.findings = framework_bound(p)
    src = "import lightning as L\n" + "\n" * 7 + "t = L.Trainer(max_steps=3)\n"
    fixes = plan_fixes(PlanInput(p, [], False, src, "t.py"))
    (fix,) = [f for f in fixes if f.name == "framework-knobs"]
    assert fix.applicable and fix.selected and fix.sites == ["t.py:9"]
    (edit,) = fix.edits
    assert "L.Trainer(max_steps=3, enable_progress_bar=False)" in edit.codemod(src, "t.py").source
    bare = _profile(0.3, knobs_site=None)
    bare.findings = framework_bound(bare)
    (none,) = [
        f
        for f in plan_fixes(PlanInput(bare, [], False, src, "t.py"))
        if f.name == "framework-knobs"
    ]
    assert not none.applicable and "no settings call" in none.reason


def test_framework_key_round_trips() -> None:
    from gpuopt.model.document import decode, encode

    p = _profile(0.5)
    back = decode(encode(p), "t.json")
    assert back.framework == p.framework
    assert msgspec.json.decode(encode(p))["framework"]["knobs_site"] == "t.py:9"


def _env() -> dict[str, str]:
    # torchvision's CUDA wheel on a CPU torch: the corpus's shim lets Lightning import it
    return {"PYTHONPATH": str(SHIM), "OMP_NUM_THREADS": "1"}


def test_lightning_run_records_phases_and_the_training_steps_memory(tmp_path: Path) -> None:
    # installed, not imported here (torchvision's CUDA wheel fails on a CPU torch without the
    # shim the child process gets)
    if importlib.util.find_spec("lightning") is None:
        pytest.skip("lightning is not installed")
    out = tmp_path / "run"
    args = ("profile", "--quiet", "--memory-for", "h100", "--window", "5", "-o", str(out))
    r = run_gpuopt(*args, str(SCRIPT), env=_env(), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((out / "profile.json").read_text())
    fw = doc["framework"]
    assert fw["name"] == "lightning"
    assert fw["phases"] == [{"name": "sanity-check", "steps": 2}, {"name": "train", "steps": 60}]
    assert fw["entry"] == marker_site(SCRIPT, "fit")
    assert fw["knobs_site"] == marker_site(SCRIPT, "trainer")
    assert fw["python_share"] is None or 0 <= fw["python_share"] <= 1
    predicted = doc["memory"]["predicted"]
    # the training step (its batch of 32), not the sanity check's batch indexing the dataset
    assert predicted["batch_size"] == 32
    assert predicted["replayed"].startswith("2 module call(s)")
    assert all(g["bytes"] < 1 << 20 for g in predicted["largest"])


GAN = ROOT / "benchmarks" / "frameworks" / "lightning_gan.py"


def test_a_manual_optimization_gan_is_one_step_a_batch(tmp_path: Path) -> None:
    """Two optimizers stepped by hand in one training_step: Lightning's global_step counts 40
    optimizer steps, the script's 20 batches are gpuopt's 20 steps, and the recorded iteration
    is the whole batch (both halves of the GAN)."""
    if importlib.util.find_spec("lightning") is None:
        pytest.skip("lightning is not installed")
    out = tmp_path / "run"
    args = ("profile", "--quiet", "--memory-for", "h100", "-o", str(out), str(GAN))
    r = run_gpuopt(*args, env=_env(), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((out / "profile.json").read_text())
    assert doc["steps"]["count"] == 20
    fw = doc["framework"]
    assert fw["name"] == "lightning" and fw["phases"] == [{"name": "train", "steps": 20}]
    assert fw["entry"] == marker_site(GAN, "fit")
    assert fw["knobs_site"] == marker_site(GAN, "trainer")
    predicted = doc["memory"]["predicted"]
    assert predicted["batch_size"] == 64
    assert predicted["replayed"].startswith("4 module call(s)")
    assert "2 backward(s), 2 optimizer step(s)" in predicted["replayed"]
    # the losses logged to the progress bar each step: Lightning's reads, the user's self.log
    # (a loaded machine may add framework-bound: Lightning's own Python, a share of the step)
    lightning = [f for f in doc["findings"] if f["evidence"].get("framework") == "lightning"]
    (read,) = [f for f in lightning if f["id"] == "sync-in-step"]
    assert "prog_bar=False" in read["fix"]


@pytest.mark.parametrize("script", [SCRIPT, GAN], ids=["autoencoder", "gan"])
def test_the_training_steps_memory_is_within_5_percent_of_the_real_step(
    tmp_path: Path, script: Path
) -> None:
    """benchmarks/memory_truth.py on a LightningModule: the real second step measured (torch's
    MemTracker over the LightningModule from its training_step; gpuopt's tracker for the GAN,
    whose discriminator is called three times) against the recorded step's replay."""
    if importlib.util.find_spec("lightning") is None:
        pytest.skip("lightning is not installed")
    out = tmp_path / "truth.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "memory_truth.py"), str(out), str(script)]
    r = subprocess.run(
        cmd, cwd=ROOT, env={**os.environ, **_env()}, capture_output=True, text=True, timeout=600
    )
    assert out.exists(), r.stderr[-2000:]
    truth = json.loads(out.read_text())
    assert truth["truth_error"] == "" and truth["truth_peak"]
    assert truth["truth_by"].startswith("torch MemTracker" if script == SCRIPT else "gpuopt's")
    assert abs(truth["fake_peak"] / truth["truth_peak"] - 1) < 0.05
