"""`gpuopt optimize` as a user runs it (subprocesses, real runs on CPU): the diff on stdout that
git and patch accept, the user's file untouched without --write, --write with a backup and
nothing left to change after, --apply's fixes.json that `gpuopt profile --fixes` uses,
optimize.json read back by `gpuopt report` in every format, and the failures."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import msgspec
import pytest
from conftest import ROOT, run_gpuopt
from typer.testing import CliRunner

import gpuopt.fixes.dataloader.sweep as sweep_module
import gpuopt.optimize.output.results as results_module
from gpuopt.commands.cli import app
from gpuopt.fixes.dataloader.sweep import SweepPoint, SweepResult
from gpuopt.model.optimize import Gain, OptimizeDocument

pytestmark = pytest.mark.slow


def _copy(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copy(ROOT / "examples" / name, dst)
    return dst


def _doc(path: Path) -> OptimizeDocument:
    return msgspec.json.decode((path / "optimize.json").read_bytes(), type=OptimizeDocument)


@pytest.fixture(scope="module")
def sync_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    tmp = tmp_path_factory.mktemp("sync")
    _copy(tmp, "sync_metrics.py")
    r = run_gpuopt("optimize", "--quick", "-o", "out", "sync_metrics.py", cwd=tmp, timeout=300)
    return tmp, r


def test_sync_fix_diff_on_stdout_applies_and_training_is_exact(
    sync_run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """Whether the fix stays depends on how this CPU times it (kept unmeasured as a GPU's gain,
    whatever the CPU measured short of slower, or dropped when measured slower); in every case
    its diff is the one that applies, on stdout when kept, in optimize.json when dropped."""
    tmp, r = sync_run
    assert r.returncode == 0, r.stderr
    doc = _doc(tmp / "out")
    assert doc.schema == "gpuopt.optimize/1" and doc.verification is not None
    assert doc.verification.verified == "exact"
    (syncs,) = [f for f in doc.fixes if f.id == "syncs"]
    assert syncs.mode == "source"
    if syncs.applied:  # kept on a CPU, never with a CPU's gain: its gain is a GPU's
        assert syncs.verified == "exact" and "no GPU here" in syncs.notes[-1]
        assert doc.gain is not None and doc.gain.label == "GPU-only gain, not measured here"
        assert syncs.gain is None
    else:  # measured slower on this CPU (two small ops a step more): never kept
        assert "slower in the training run" in syncs.reason, syncs.reason
        assert r.stdout == ""  # nothing kept: no diff to apply
    patch = r.stdout if syncs.applied else syncs.diff
    assert patch.startswith("--- ./sync_metrics.py\n+++ ./sync_metrics.py\n")
    assert "running_loss += loss.detach().double()" in patch
    original = (ROOT / "examples" / "sync_metrics.py").read_text()
    assert (tmp / "sync_metrics.py").read_text() == original  # untouched without --write
    (tmp / "fix.patch").write_text(patch)
    subprocess.run(["git", "init", "-q"], cwd=tmp, check=True)
    check = subprocess.run(["git", "apply", "--check", "fix.patch"], cwd=tmp, capture_output=True)
    assert check.returncode == 0, check.stderr
    assert doc.baseline is not None and doc.candidate is not None
    runs = {run.label: tmp / "out" / run.dir for run in doc.runs}
    base_out = (runs["baseline 1"] / "stdout.txt").read_text()
    assert base_out.count("step") == 2  # 30 steps, a print every 10 (--steps stops at step 30)
    assert (runs["candidate 1"] / "stdout.txt").read_text() == base_out
    # progress on stderr (a pipe: one line a phase): --quick with one fix is the profile and
    # three timed runs (a pair more only to confirm a candidate run a little slower)
    progress = [ln for ln in r.stderr.splitlines() if ln.startswith("gpuopt optimize: run ")]
    labels = [ln.split(": ", 2)[2].split(" (")[0] for ln in progress]
    assert labels[:4] == ["baseline 1", "baseline 2", "candidate 1", "baseline 3"]
    assert len(labels) in (4, 6) and progress[0].startswith("gpuopt optimize: run 1: ")
    assert progress[1].startswith("gpuopt optimize: run 2 of 4: ")
    timed = {run.label: run.timed for run in doc.runs}
    assert timed["baseline 1"] is False
    assert all(timed[k] for k in ("baseline 2", "candidate 1", "baseline 3"))
    assert doc.gain is not None and doc.gain.stopped in ("minimum runs", "tight", "slower")
    # a timed run carries no recorder, profiler window or sampler: nothing it left out
    timed_run = json.loads((runs["baseline 2"] / "profile.json").read_text())
    assert timed_run["dispatch"]["window_steps"] == 0 and timed_run["utilization"]["samples"] == 0
    assert not any(s.get("instrumented") for s in timed_run["steps"]["series"])
    assert len(timed_run["training"]["losses"]) == 30


@pytest.mark.parametrize("fmt", ["text", "md", "json", "html"])
def test_report_renders_optimize_json(
    sync_run: tuple[Path, subprocess.CompletedProcess[str]], fmt: str
) -> None:
    tmp, _ = sync_run
    r = run_gpuopt("report", "out", "--format", fmt, cwd=tmp)
    assert r.returncode == 0, r.stderr
    assert "syncs" in r.stdout
    if fmt == "json":
        assert json.loads(r.stdout)["schema"] == "gpuopt.optimize/1"
    if fmt == "html":
        assert "<svg" in r.stdout and "<script" not in r.stdout


def test_write_edits_in_place_with_a_backup_and_leaves_nothing_to_change(tmp_path: Path) -> None:
    script = _copy(tmp_path, "sync_metrics.py")
    r = run_gpuopt("optimize", "--no-measure", "--write", "-o", "a", script.name, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""  # --write: nothing on stdout
    assert "loss.detach().double()" in script.read_text()
    backup = tmp_path / "sync_metrics.py.gpuopt-orig"
    assert backup.read_text() == (ROOT / "examples" / "sync_metrics.py").read_text()
    again = run_gpuopt("optimize", "--no-measure", "-o", "b", script.name, cwd=tmp_path)
    assert again.returncode == 0 and again.stdout == ""  # nothing left to change


def _quiet_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """The profile's cores as a quiet machine has them: the training's threads are left (on a
    busy one the fix would also set them, and one thread's float sums may differ in rounding)."""
    import gpuopt.fixes.dataloader.plan as loader_plan

    monkeypatch.setattr(loader_plan, "training_threads", lambda profile: None)


def _swept(site: str) -> SweepResult:
    """What the sweep measures for io_loader.py on a quiet machine (its DataLoader alone:
    docs/benchmarks.md): four workers load five times as many batches a second."""
    base = SweepPoint(0, False, None, False, batches=20, seconds=1.0, batches_per_s=20.0)
    four = SweepPoint(4, False, 2, False, batches=100, seconds=1.0, batches_per_s=100.0)
    return SweepResult(site, base, [base, four], four, 5.0, same_batches=True)


def test_apply_keeps_the_dataloader_fix_at_run_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the code decides from what it measured: the sweep's timings and the runs' gain are
    given (as a quiet machine measures them), so the test does not ask how fast this machine is
    today (under load the sweep found no faster setting and the test failed). The runs are real:
    the training with the fix is checked the same, step for step, and `gpuopt profile --fixes`
    trains with it. The gain itself is measured by benchmarks/bench_optimize.py."""
    script = _copy(tmp_path, "io_loader.py")
    args = ["--samples", "320", "--epochs", "1", "--wait-ms", "5"]
    monkeypatch.chdir(tmp_path)
    _quiet_cores(monkeypatch)
    swept: list[str] = []

    def sweep(script: str, args: list[str], site: str, out_file: Path, **_: object) -> SweepResult:
        swept.append(site)
        return _swept(site)

    measured = Gain(
        2.0, low=1.8, high=2.2, noise=0.03, measurable=True, label="2.00x faster", verdict="faster"
    )
    monkeypatch.setattr(sweep_module, "run_sweep", sweep)
    monkeypatch.setattr(results_module, "gain", lambda *a, **kw: measured)
    r = CliRunner().invoke(app, ["optimize", "--apply", "--quick", "-o", "o", script.name, *args])
    assert r.exit_code == 0, r.output
    assert swept == ["io_loader.py:40"]  # the finding's DataLoader line was swept
    assert "---" not in r.output  # the only fix is kept at run time: no source change to show
    doc = _doc(tmp_path / "o")
    (dl,) = [f for f in doc.fixes if f.id == "dataloader"]
    assert dl.applied and dl.mode == "runtime" and dl.verified == "exact"
    assert int(dl.settings["num_workers"]) == 4  # the sweep's best setting
    assert doc.gain == measured and doc.speedup == 2.0
    fixes = json.loads((tmp_path / "o" / "fixes.json").read_text())
    assert fixes["loaders"][0]["site"] == "io_loader.py:40"
    p = run_gpuopt(
        "profile", "--quiet", "--fixes", "o", "-o", "p", script.name, *args, cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr
    prof = json.loads((tmp_path / "p" / "profile.json").read_text())
    assert prof["fixes_applied"] == ["dataloader"]
    assert prof["dataloaders"][0]["num_workers"] == 4


def test_a_loader_fix_too_noisy_to_measure_is_kept_on_the_sweeps_estimate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy machine: the training runs cannot decide ("too noisy to measure") while the sweep
    timed the loader alone and estimated 2x on an epoch. The fix is applied, its note says the
    estimate is one, and the headline's gain stays unmeasured."""
    script = _copy(tmp_path, "io_loader.py")
    args = ["--samples", "320", "--epochs", "1", "--wait-ms", "5"]
    monkeypatch.chdir(tmp_path)
    _quiet_cores(monkeypatch)

    def swept(*a: object, **kw: object) -> SweepResult:
        out = _swept(str(a[2]))
        out.epoch_gain = 2.0
        return out

    noisy = Gain(None, None, None, noise=0.5, label="too noisy to measure (the runs' pairs ±54%)")
    noisy.verdict = "not-measured"
    monkeypatch.setattr(sweep_module, "run_sweep", swept)
    monkeypatch.setattr(results_module, "gain", lambda *a, **kw: noisy)
    r = CliRunner().invoke(app, ["optimize", "--apply", "--quick", "-o", "o", script.name, *args])
    assert r.exit_code == 0, r.output
    doc = _doc(tmp_path / "o")
    (dl,) = [f for f in doc.fixes if f.id == "dataloader"]
    assert dl.applied and dl.verified == "exact"
    assert any("kept on the sweep's timing of the loader alone: est. 2.00x" in n for n in dl.notes)
    assert doc.speedup is None
    fixes = json.loads((tmp_path / "o" / "fixes.json").read_text())
    assert fixes["loaders"][0]["site"] == "io_loader.py:40"


def test_a_fix_measured_slower_is_dropped_whatever_the_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other side of the decision, on the same given timings: a candidate the runs measure
    slower is not kept, and says why."""
    script = _copy(tmp_path, "io_loader.py")
    args = ["--samples", "320", "--epochs", "1", "--wait-ms", "5"]
    monkeypatch.chdir(tmp_path)
    _quiet_cores(monkeypatch)
    monkeypatch.setattr(sweep_module, "run_sweep", lambda *a, **kw: _swept(a[2]))
    slower = Gain(
        0.8,
        low=0.75,
        high=0.85,
        noise=0.03,
        measurable=True,
        label="1.25x slower",
        verdict="slower",
    )
    monkeypatch.setattr(results_module, "gain", lambda *a, **kw: slower)
    r = CliRunner().invoke(app, ["optimize", "--apply", "--quick", "-o", "o", script.name, *args])
    assert r.exit_code == 0, r.output
    (dl,) = [f for f in _doc(tmp_path / "o").fixes if f.id == "dataloader"]
    assert not dl.applied and "slower in the training run (0.80x" in dl.reason
    assert (
        not (tmp_path / "o" / "fixes.json").exists()
        or not json.loads((tmp_path / "o" / "fixes.json").read_text())["loaders"]
    )


def test_failing_baseline_exits_with_the_scripts_code(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("import sys\nprint('hi')\nsys.exit(3)\n")
    r = run_gpuopt("optimize", "-o", "o", "bad.py", cwd=tmp_path)
    assert r.returncode == 3
    assert "the baseline run failed" in r.stderr and "Traceback" not in r.stderr
    assert _doc(tmp_path / "o").status == "error"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fix", "turbo", "x.py"], "unknown fix 'turbo'"),
        (["missing.py"], "no such file"),
        ([], "optimize needs a SCRIPT"),
    ],
    ids=["unknown-fix", "missing-script", "no-script"],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "x.py").write_text("print(1)\n")
    r = run_gpuopt("optimize", *args, cwd=tmp_path)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr


def test_a_script_with_nothing_to_fix(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text(
        "import torch\nm = torch.nn.Linear(2, 1)\no = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(10):\n    o.zero_grad()\n    m(torch.randn(4, 2)).sum().backward()\n"
        "    o.step()\n"
    )
    r = run_gpuopt("optimize", "-o", "o", "ok.py", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == ""
    doc = _doc(tmp_path / "o")
    assert doc.status == "planned" and "no fix to apply" in doc.warnings[0]
    assert "ok.py — 10 steps a run (the script ends before --steps 30), seed 0" in r.stderr


def test_opt_in_fixes_only_when_named(tmp_path: Path) -> None:
    script = _copy(tmp_path, "sync_metrics.py")
    plain = run_gpuopt("optimize", "--no-measure", "-o", "a", script.name, cwd=tmp_path)
    assert plain.returncode == 0 and "compile" not in plain.stdout
    named = ["--fix", "compile", "--fix", "channels-last"]
    r = run_gpuopt("optimize", "--no-measure", *named, "-o", "b", script.name, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "+    model.to(memory_format=torch.channels_last)\n+    model.compile()\n" in r.stdout
    assert "detach().double()" not in r.stdout  # --fix names the fixes: syncs was not named
    doc = _doc(tmp_path / "b")
    opt_in = {f.id: f for f in doc.fixes if f.opt_in}
    assert opt_in["compile"].applied and opt_in["compile"].mode == "source"
    assert opt_in["channels-last"].applied and doc.status == "planned"
    fp16 = run_gpuopt(
        "optimize",
        "--no-measure",
        "--fix",
        "amp",
        "--amp-dtype",
        "fp16",
        "-o",
        "c",
        script.name,
        cwd=tmp_path,
    )
    assert fp16.returncode == 0, fp16.stderr
    (amp,) = [f for f in _doc(tmp_path / "c").fixes if f.id == "amp"]
    assert "fp16 autocast" in amp.reason and "GradScaler" in amp.reason
    bad = run_gpuopt("optimize", "--amp-dtype", "fp8", script.name, cwd=tmp_path)
    assert bad.returncode == 2 and "--amp-dtype 'fp8'" in bad.stderr


def test_a_source_fix_that_changes_nothing_is_not_applied_nor_run(tmp_path: Path) -> None:
    """Every per-step read is printed at once (as in pytorch/examples' DCGAN): the syncs rewrite
    leaves each line, so the fix is not used — no runs for it, no 'applied' with an empty diff."""
    (tmp_path / "p.py").write_text(
        "import torch\nm = torch.nn.Linear(2, 1)\no = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for i in range(12):\n    o.zero_grad()\n    loss = m(torch.randn(4, 2)).square().mean()\n"
        "    loss.backward()\n    o.step()\n    print(i, loss.item())\n"
    )
    r = run_gpuopt("optimize", "--steps", "8", "-o", "o", "p.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    doc = _doc(tmp_path / "o")
    (syncs,) = [f for f in doc.fixes if f.id == "syncs"]
    assert not syncs.applied and syncs.reason.startswith("nothing to change: every site")
    assert syncs.skipped and "is printed at line 9 every step" in syncs.skipped[0]
    assert [run.label for run in doc.runs] == ["baseline 1"] and doc.status == "planned"


def test_a_timed_run_keeps_losses_and_batch_shapes_and_nothing_else(tmp_path: Path) -> None:
    """``profile --measure-only`` (optimize's timed runs): no recorder window, no sampler, no
    step left out as instrumented — but the losses, and the batch shapes a per-sample gain
    needs."""
    script = _copy(tmp_path, "ragged_steps.py")
    r = run_gpuopt(
        "profile", "--quiet", "--measure-only", "--record-losses", "--seed", "0", "--steps",
        "12", "-o", "p", script.name, "--mode", "one", "--samples", "64",
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    prof = json.loads((tmp_path / "p" / "profile.json").read_text())
    assert prof["dispatch"]["window_steps"] == 0 and prof["utilization"]["samples"] == 0
    assert not any(s.get("instrumented") for s in prof["steps"]["series"])
    assert len(prof["training"]["losses"]) == 12
    assert prof["ragged"]["batches"] >= 12 and prof["ragged"]["samples"] >= 12
    assert prof["ragged"]["batch_size_1_variable"]
