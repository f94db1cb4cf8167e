"""Scripts of the shapes public training scripts have, each profiled whole: optimizers that step
in turn, a loss recorder that changes nothing else measured, a memory replay in the mode of the
recorded training step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import ROOT, SCRIPTS, marker_site, run_gpuopt

TINY = SCRIPTS / "tiny_batch_eval.py"


def _profile(out: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    r = run_gpuopt("profile", "--quiet", "--force", "-o", str(out), *args, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    return dict(json.loads((out / "profile.json").read_text()))


def _loops(doc: dict[str, Any]) -> list[tuple[str, float]]:
    return [(e["site"], e["iterations_per_step"]) for e in doc["loops"]]


def _findings(doc: dict[str, Any]) -> list[tuple[str, str | None]]:
    return sorted(
        ((f["id"], f.get("site")) for f in doc["findings"]), key=lambda f: (f[0], f[1] or "")
    )


def test_recording_losses_changes_no_loop_and_no_finding(tmp_path: Path) -> None:
    """The loss kept at each backward is gpuopt's own tensor calls: the recorder does not count
    them as three more executions of ``loss.backward()`` (which made the training loop a loop of
    four iterations a step, and at batch 4 a false ``ragged-batches``). The recorder's counts are
    the same with and without the flag; of the findings, those that read the counts (a busy
    machine may tip one that reads times)."""
    rel = str(TINY.relative_to(ROOT))
    plain = _profile(tmp_path / "plain", rel)
    recorded = _profile(tmp_path / "recorded", "--record-losses", rel)
    assert _loops(recorded) == _loops(plain) == []
    counted = {"ragged-batches", "loop-indexing"}
    assert [f for f in _findings(recorded) if f[0] in counted] == [
        f for f in _findings(plain) if f[0] in counted
    ]
    assert "ragged-batches" not in {i for i, _ in _findings(recorded)}
    for key in ("ops_per_step", "torch_function_calls_per_step", "view_ops_per_step"):
        assert recorded["dispatch"][key] == plain["dispatch"][key], key
    assert [(s["site"], s["count_per_step"]) for s in recorded["syncs"]] == [
        (s["site"], s["count_per_step"]) for s in plain["syncs"]
    ]
    assert plain.get("training") is None
    assert len(recorded["training"]["losses"]) == recorded["steps"]["count"] == 48


def test_memory_is_replayed_in_the_mode_of_the_training_step(tmp_path: Path) -> None:
    """The script ends in ``model.eval()``: its recorded step ran in training mode (dropout's
    mask, the LSTM's training workspace), and is replayed so: the same prediction as the same
    script without the evaluation at the end."""
    rel = str(TINY.relative_to(ROOT))
    ends_in_eval = _profile(tmp_path / "eval", "--memory-for", "h100", rel)
    no_eval = _profile(tmp_path / "train", "--memory-for", "h100", rel, "--no-eval")
    a, b = ends_in_eval["memory"]["predicted"], no_eval["memory"]["predicted"]
    assert a["by_category"] == b["by_category"]
    assert a["max_batch_size"] == b["max_batch_size"]
    notes = a.get("notes") or []
    assert any("LSTM reserve space" in n for n in notes) and any("dropout" in n for n in notes)


def test_every_optimizer_stepping_in_turn_counts_and_its_step_is_replayed(
    tmp_path: Path,
) -> None:
    """Two layers, each trained six times by its own optimizer, in turn: twelve steps, each
    ending at its optimizer's step; the memory probe records the first one although the layers
    call ``forward`` themselves (no ``Module.__call__``): from the first torch call on a
    parameter of an optimizer."""
    script = SCRIPTS / "layers_in_turn.py"
    doc = _profile(tmp_path / "run", "--memory-for", "h100", str(script.relative_to(ROOT)))
    assert doc["steps"]["count"] == 12 and doc["steps"]["marker"] == "optimizer.step"
    p = doc["memory"]["predicted"]
    assert p is not None, doc["memory"]
    assert p["batch_size"] == 256 and p["max_batch_size"] > 256
    assert p["replayed"].startswith("2 module call(s) (ReLU),")  # no data loading, no .to()
    assert "1 backward(s), 1 optimizer step(s)" in p["replayed"]
    assert p["by_category"]["activations"] > 0 and p["by_category"]["optimizer_state"] > 0
    assert "no module call" not in (doc["memory"].get("note") or "")


def test_sampling_inside_the_loop_is_a_named_slow_step(tmp_path: Path) -> None:
    """Every 20 iterations the script samples 3,000 tokens from its model: those steps (one in
    the warm-up, two after it) are one ``slow-steps`` finding at the sampling line, labelled
    sampling, not warm-up."""
    script = SCRIPTS / "sampling_in_loop.py"
    doc = _profile(tmp_path / "run", str(script.relative_to(ROOT)))
    site = marker_site(script, "slow: sampling inside the loop")
    found = [f for f in doc["findings"] if f["id"] == "slow-steps" and f["site"] == site]
    assert len(found) == 1, [(f["id"], f.get("site")) for f in doc["findings"]]
    ev = found[0]["evidence"]
    # a busy machine may slow the steps around one sampling step as much: at least one of the
    # two after the warm-up is named, and nothing but sampling steps
    sampled = set(ev["steps"]) & {21, 41}
    assert sampled and set(ev["steps"]) <= {1, 21, 41} and ev["kind"] == "sampling"
    assert ev["excess_s"] > 0 and 0 < ev["share"] < 1
    named = {s["index"]: s for s in doc["steps"]["slow"]}
    step = min(sampled)
    assert named[step]["site"] == site and named[step]["samples"] >= 1


def test_sampling_between_short_steps_costs_the_run_what_it_takes(tmp_path: Path) -> None:
    """Steps of a few milliseconds, 300 tokens sampled every 5 iterations: each sampling step is
    tens of milliseconds above the median (far under the 0.1 s an unsampled outlier needs; a look
    every 50 ms would miss many) and the 60 of them three quarters of the loop. One finding at
    the sampling line, HIGH, its steps the sampling ones (most of the 60; a look that lands as
    the step ends may name the next one too), every 5 steps. On a busy machine too (the test
    suite's other worker): a step whose looks all landed in its training part joins on the
    recurrence."""
    script = SCRIPTS / "sampling_short_steps.py"
    doc = _profile(tmp_path / "run", str(script.relative_to(ROOT)), env={"OMP_NUM_THREADS": "1"})
    site = marker_site(script, "slow: sampling every 5 iterations")
    found = [f for f in doc["findings"] if f["id"] == "slow-steps"]
    assert [f["site"] for f in found] == [site], [(f["id"], f.get("site")) for f in found]
    ev = found[0]["evidence"]
    sampling = set(range(1, 300, 5))
    steps = set(ev["steps"])
    assert len(steps & sampling) >= 45 and len(steps - sampling) <= 2, ev["steps"]
    assert ev["kind"] == "sampling" and ev["every_steps"] == 5
    assert found[0]["severity"] == "high" and ev["share"] >= 0.25


ACT = """import math

import torch
from torch import nn


class NewGELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
"""  # noqa: E501 (minGPT's line as it is)

TRAIN = """import torch
from torch import nn

from tinylib.act import NewGELU

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), NewGELU(), nn.Linear(256, 64))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(12):
    x = torch.randn(32, 64)
    loss = (model(x) - x).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
"""


def test_a_project_package_beside_the_script_is_the_users_code(tmp_path: Path) -> None:
    """minGPT's layout: the model in the project's package (``mingpt/model.py``), the script in
    ``projects/chargpt/``, run from the project's root with the package importable from there.
    The hand-written GELU in the package is found at its line, not left as library code."""
    proj = tmp_path / "proj"
    (proj / "tinylib").mkdir(parents=True)
    (proj / "tinylib" / "__init__.py").write_text("")
    (proj / "tinylib" / "act.py").write_text(ACT)
    (proj / "projects" / "run").mkdir(parents=True)
    (proj / "projects" / "run" / "train.py").write_text(TRAIN)
    out = tmp_path / "out"
    r = run_gpuopt(
        "profile", "--quiet", "-o", str(out), "projects/run/train.py",
        cwd=proj, env={"PYTHONPATH": str(proj)}, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "profile.json").read_text())
    found = [f for f in doc["findings"] if f["id"] == "hand-written-op"]
    assert [f["site"] for f in found] == ["tinylib/act.py:9"], doc["findings"]
    assert found[0]["evidence"]["replacement"].endswith('gelu(x, approximate="tanh")')


def test_an_editable_project_run_from_its_own_folder_is_the_users_code(tmp_path: Path) -> None:
    """minGPT's layout installed with ``pip install -e .`` (the ``__editable__`` finder and its
    ``.pth``, built by hand) and run as ``cd projects/run && python train.py``: the package is
    imported from two folders up, outside the script's folder and the working directory. The
    hand-written GELU in it is found at its line, not left as library code."""
    from editable_support import install_editable

    proj = tmp_path / "proj"
    (proj / "tinylib").mkdir(parents=True)
    (proj / "tinylib" / "__init__.py").write_text("")
    (proj / "tinylib" / "act.py").write_text(ACT)
    run = proj / "projects" / "run"
    run.mkdir(parents=True)
    (run / "train.py").write_text(TRAIN)
    site_dir = tmp_path / "env" / "site-packages"
    install_editable(proj, "tinylib", site_dir)
    boot = tmp_path / "boot"  # Python reads the folder's .pth files at start-up, as a venv's
    boot.mkdir()
    (boot / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({str(site_dir)!r})\n")
    out = tmp_path / "out"
    r = run_gpuopt(
        "profile", "--quiet", "-o", str(out), "train.py",
        cwd=run, env={"PYTHONPATH": str(boot)}, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "profile.json").read_text())
    found = [f for f in doc["findings"] if f["id"] == "hand-written-op"]
    act = (proj / "tinylib" / "act.py").resolve()
    assert [f["site"] for f in found] == [f"{act}:9"], doc["findings"]
