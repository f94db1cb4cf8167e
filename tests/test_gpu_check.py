"""`make gpu-check`'s runner, tested on the CPU: the plan it makes (which checks, which budgets),
that each line reaches the document as it is printed and a check past its budget is stopped
with what it printed kept, and a whole dry run (every check's logic on the CPU, tiny sizes)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from conftest import ROOT, load_benchmark

RUNNER = ROOT / "benchmarks" / "gpu" / "gpu_check.py"


def _runner() -> ModuleType:
    return load_benchmark("gpu/gpu_check")


def test_the_preferred_checks_first_then_every_other_by_name() -> None:
    gc = _runner()
    names = [p.name for p in gc.checks()]
    assert names[:3] == ["check_nvml.py", "check_profile.py", "check_aot.py"]
    assert names[3:] == sorted(names[3:])
    assert all(n.startswith("check_") for n in names)


def test_budgets_fit_the_total() -> None:
    gc = _runner()
    names = [
        "check_nvml.py",
        "check_profile.py",
        "check_aot.py",
        *(f"check_x{i}.py" for i in range(5)),
    ]
    got = gc.budgets(names, 195.0)
    assert sum(got) == pytest.approx(195.0)
    assert got[1] / got[0] == pytest.approx(100 / 10)  # scaled together
    assert gc.budgets(names[:2], 195.0) == [10.0, 100.0]  # room enough: as preferred


def test_a_check_past_its_budget_is_stopped_and_keeps_what_it_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gc = _runner()
    monkeypatch.setattr(gc, "GRACE_S", 0.5)
    doc = gc.Doc(tmp_path / "doc.md")
    slow = "print('- measured: 1.00x', flush=True); import time; time.sleep(60)"
    gc.run_check(doc, [sys.executable, "-c", slow], 0.5, gc.child_env(False), "check_slow.py")
    crash = "print('- half', flush=True); raise SystemExit('broken')"
    gc.run_check(doc, [sys.executable, "-c", crash], 5, gc.child_env(False), "check_crash.py")
    doc.close()
    text = (tmp_path / "doc.md").read_text()
    assert "- measured: 1.00x" in text
    assert "- check_slow.py: stopped after" in text
    assert "- half\n" in text and "- check_crash.py: FAILED, exit code 1: broken" in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU behaviour")
def test_without_a_gpu_it_says_so_and_exits_0(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, str(RUNNER), "--doc", str(tmp_path / "doc.md")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "no CUDA device" in r.stdout
    assert not (tmp_path / "doc.md").exists()


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run is the CPU's")
def test_dry_run_runs_every_check_on_the_cpu(tmp_path: Path) -> None:
    doc = tmp_path / "gpu-validation.md"
    r = subprocess.run(
        [sys.executable, str(RUNNER), "--dry-run", "--doc", str(doc), "--budget", "200"],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=tmp_path,  # runs from anywhere
    )
    assert r.returncode == 0, r.stderr
    text = doc.read_text()
    assert "DRY RUN, not a measurement" in text
    for script in ("check_nvml.py", "check_profile.py", "check_aot.py"):
        assert f"### {script}" in text
        assert f"({script}: " in text, f"{script} did not finish:\n{text}"
    assert "**profile overhead**" in text
    assert "stderr of `gpuopt profile --quiet`, lines not gpuopt's or the script's: none" in text
    assert "| resnet_stage | " in text and "FAILED" not in text


def test_a_check_that_cannot_fit_is_not_started_and_its_time_goes_to_the_others() -> None:
    """check_optimize needs ~180 s (measured on an H200): within make gpu-check's 225 s it is
    not started and the others share the time; given room, it runs with what it needs."""
    gc = _runner()
    names = [p.name for p in gc.checks()]
    assert "check_optimize.py" in names
    short = dict(zip(names, gc.plan(names, 195.0), strict=True))
    assert short["check_optimize.py"] is None
    assert sum(v for v in short.values() if v is not None) == pytest.approx(195.0)
    roomy = dict(zip(names, gc.plan(names, 600.0), strict=True))
    assert (roomy["check_optimize.py"] or 0) >= gc.NEEDS["check_optimize.py"]
    assert roomy["check_profile.py"] == 100.0  # as preferred


def test_the_runner_says_how_to_run_a_check_it_skipped(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu" / "gpu_check.py"), "--dry-run",
         "--budget", "60", "--doc", str(doc)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "check_optimize.py: not run: it needs about 180 s" in doc.read_text()


def test_check_profile_parts_rotates_three_sides_and_reports_each(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``check_profile.py --parts``: plain, ``--measure-only`` and the full profile in rotated
    rounds, a median ratio for each gpuopt side (where the H200's overhead goes)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks" / "gpu"))
    cp = load_benchmark("gpu/check_profile")
    order: list[str] = []

    class Sides:
        pair_s, last = 0.0, None

        def plain(self, budget: object) -> float:
            order.append("plain")
            return 2.0

        def measure(self, budget: object) -> float:
            order.append("measure")
            return 2.2

        def gpuopt(self, budget: object) -> float:
            order.append("gpuopt")
            return 3.0

    cp.overhead(Sides(), cp.Budget(1000.0), 3, 3, True)
    assert order == ["plain", "measure", "gpuopt", "measure", "gpuopt", "plain",
                     "gpuopt", "plain", "measure"]  # fmt: skip
    out = capsys.readouterr().out
    assert "profile overhead, --measure-only** (" in out and "**1.100×**" in out
    assert "**profile overhead** (" in out and "**1.500×**" in out


def test_check_frameworks_says_why_it_skips_without_transformers_or_wheels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a GPU machine without transformers and without .whl/frameworks the check skips with
    the command that fills the folder (never a traceback)."""
    cf = load_benchmark("gpu/check_frameworks")
    monkeypatch.setattr(cf, "missing", lambda: ["transformers"])
    monkeypatch.setattr(cf, "WHEELS", tmp_path / "none")
    why = cf.bring_frameworks()
    assert why is not None and "transformers not importable" in why
    assert "prepare_wheels.sh" in why


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run is the CPU's")
def test_check_frameworks_dry_run_times_both_settings_of_the_hf_trainer() -> None:
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu" / "check_frameworks.py"),
         "--budget", "55"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "GPUOPT_GPU_CHECK_DRY_RUN": "1", "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "logging_nan_inf_filter=False (medians;" in r.stdout
    assert "gpuopt profile: not run" in r.stdout  # a small budget: the pairs alone
