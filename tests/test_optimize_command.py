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

from gpuopt.model.optimize import OptimizeDocument

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
    tmp, r = sync_run
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("--- ./sync_metrics.py\n+++ ./sync_metrics.py\n")
    assert "running_loss += loss.detach().double()" in r.stdout
    original = (ROOT / "examples" / "sync_metrics.py").read_text()
    assert (tmp / "sync_metrics.py").read_text() == original  # untouched without --write
    (tmp / "fix.patch").write_text(r.stdout)
    subprocess.run(["git", "init", "-q"], cwd=tmp, check=True)
    check = subprocess.run(["git", "apply", "--check", "fix.patch"], cwd=tmp, capture_output=True)
    assert check.returncode == 0, check.stderr
    doc = _doc(tmp / "out")
    assert doc.schema == "gpuopt.optimize/1" and doc.verification is not None
    assert doc.verification.verified == "exact"
    (syncs,) = [f for f in doc.fixes if f.id == "syncs"]
    assert syncs.applied and syncs.mode == "source" and syncs.verified == "exact"
    assert doc.baseline is not None and doc.candidate is not None
    runs = {run.label: tmp / "out" / run.dir for run in doc.runs}
    base_out = (runs["baseline 1"] / "stdout.txt").read_text()
    assert base_out.count("step") == 2  # 30 steps, a print every 10 (--steps stops at step 30)
    assert (runs["candidate 1"] / "stdout.txt").read_text() == base_out
    # progress on stderr (a pipe: one line a phase): --quick with one fix is three runs
    progress = [ln for ln in r.stderr.splitlines() if ln.startswith("gpuopt optimize: run ")]
    assert [ln.split(" (")[0] for ln in progress] == [
        "gpuopt optimize: run 1: baseline 1",
        "gpuopt optimize: run 2 of 3: candidate 1",
        "gpuopt optimize: run 3 of 3: baseline 2",
    ]


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


def test_apply_keeps_the_dataloader_fix_at_run_time(tmp_path: Path) -> None:
    script = _copy(tmp_path, "io_loader.py")
    args = ["--samples", "320", "--epochs", "1", "--wait-ms", "5"]  # loading dominates clearly
    r = run_gpuopt(
        "optimize", "--apply", "--quick", "-o", "o", script.name, *args, cwd=tmp_path, timeout=300
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""  # the only fix is kept at run time: no source change to show
    doc = _doc(tmp_path / "o")
    (dl,) = [f for f in doc.fixes if f.id == "dataloader"]
    assert dl.applied and dl.mode == "runtime" and dl.verified == "exact"
    assert int(dl.settings["num_workers"]) >= 2
    assert doc.gain is not None and doc.gain.measurable and (doc.speedup or 0) > 1.5
    fixes = json.loads((tmp_path / "o" / "fixes.json").read_text())
    assert fixes["loaders"][0]["site"] == "io_loader.py:40"
    p = run_gpuopt(
        "profile", "--quiet", "--fixes", "o", "-o", "p", script.name, *args, cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr
    prof = json.loads((tmp_path / "p" / "profile.json").read_text())
    assert prof["fixes_applied"] == ["dataloader"]
    assert prof["dataloaders"][0]["num_workers"] == int(dl.settings["num_workers"])


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
