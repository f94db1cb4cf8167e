"""The Python API a notebook user calls: gpuopt.load(path) → Profile, profile.frames()."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

import gpuopt
from gpuopt.errors import GpuoptError
from gpuopt.model.document import empty_profile, encode
from gpuopt.model.profile import Profile

GOLDEN = ROOT / "tests" / "data" / "golden"
FRAMES = {
    "steps",
    "breakdown",
    "transfers",
    "syncs",
    "loops",
    "findings",
    "gpu",
    "dataloaders",
    "ranks",
    "kernels",
    "trace_steps",
    "idle_causes",
    "memory",
    "graph_breaks",
    "recompiles",
}


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_load_a_trace_folder_and_its_frames(shared_traces: Path) -> None:
    p = gpuopt.load(shared_traces / "hta" / "trace_filter")
    assert isinstance(p, Profile) and p.source == "trace"
    frames = p.frames()
    assert set(frames) == FRAMES
    gpu = frames["gpu"]
    assert list(gpu["rank"]) == [0, 1]
    assert list(gpu["utilization"]) == [g.utilization for g in p.gpu or []]
    kernels = frames["kernels"]
    assert set(kernels["rank"]) == {0, 1} and (kernels["total_us"] > 0).all()
    assert kernels["type"].isin(["COMPUTATION", "COMMUNICATION", "MEMORY"]).all()
    idle = frames["idle_causes"]
    assert len(idle) == 2 * 7 and set(idle["cause"]) >= {"dataloader", "sync", "untraced"}
    ranks = frames["ranks"]
    assert list(ranks["rank"]) == [0, 1] and ranks["step_time_median_s"].notna().all()


def test_load_a_single_trace_file(shared_traces: Path) -> None:
    path = shared_traces / "hta" / "nccl_parser_config" / "nccl_data.json.gz"
    p = gpuopt.load(str(path))
    frames = p.frames()
    assert len(frames["steps"]) == p.steps.count == 2
    steps = frames["trace_steps"]
    assert list(steps["step"]) == [s.index for s in p.steps.series]
    assert (steps["dur_us"] > 0).all()
    assert frames["loops"].empty and list(frames["loops"].columns)[:3] == [
        "site",
        "ops_per_step",
        "iterations_per_step",
    ]


def test_load_a_run_directory(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "profile.json").write_bytes(
        gzip.decompress((GOLDEN / "runs" / "segmentation_loops.json.gz").read_bytes())
    )
    p = gpuopt.load(run)
    frames = p.frames()
    assert len(frames["steps"]) == p.steps.count
    assert set(frames["findings"]["id"]) >= {"loop-indexing", "sync-in-step"}
    loops = frames["loops"]
    assert loops.loc[0, "site"] == "examples/segmentation_loops.py:23"
    assert loops.loc[0, "iterations_per_step"] == 80
    assert frames["kernels"].empty and frames["gpu"].empty  # a CPU run: no GPU, no trace
    assert list(frames["breakdown"]["part"]) == ["data_wait", "h2d", "sync", "compute", "other"]
    assert frames["breakdown"]["fraction"].sum() == pytest.approx(1.0)


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(GpuoptError, match="no such file"):
        gpuopt.load(tmp_path / "missing")
    bad = tmp_path / "profile.json"
    doc = json.loads(encode(empty_profile("t.py")))
    doc["status"] = 7
    bad.write_text(json.dumps(doc))
    with pytest.raises(GpuoptError) as ei:
        gpuopt.load(bad)
    assert "$.status" in str(ei.value) and "\n" not in str(ei.value)


def test_loading_a_profile_imports_neither_torch_nor_pandas() -> None:
    fixture = ROOT / "tests" / "data" / "report" / "host_culprits.json"
    code = (
        "import sys, gpuopt\n"
        f"p = gpuopt.load({str(fixture)!r})\n"
        "print(p.steps.count, 'torch' in sys.modules, 'pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.split() == ["64", "False", "False"], out.stderr


def test_the_worked_example_in_docs_api_prints_what_it_says() -> None:
    """Run as the page shows it, from a clone's root (its traces are the repository's copies)."""
    doc = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    code = doc.split("```python\nimport gpuopt\n\nbase = ", 1)[1].split("```", 1)[0]
    code = "import gpuopt\n\nbase = " + code
    shown = doc.split("prints (measured from the recorded traces):\n\n```\n", 1)[1].split("```")[0]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout == shown
