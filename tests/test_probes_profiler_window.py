"""The GPU profiler window: which steps it profiles and the trace file it leaves.

On a machine without CUDA the probe must do nothing and say so; its step logic and trace export
are exercised with CPU activity only (``require_cuda=False``). The kernel-level trace needs a GPU.
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import msgspec
import pytest
import torch
from probes_support import context

from gpuopt.probes.profiler_window import TRACE_NAME, ProfilerWindow


def _drive(
    probe: ProfilerWindow, tmp_path: Path, steps: int, window_start: int = 1, window_steps: int = 2
) -> dict:
    probe.start(context(tmp_path, window_start=window_start, window_steps=window_steps))
    a = torch.ones(8)
    for i in range(steps):
        for _ in range(i + 1):  # step i runs i + 1 adds: the trace tells which steps it saw
            a = a + 1
        probe.on_step(i, time.perf_counter())
    probe.stop()
    return _document(probe)


def _document(probe: ProfilerWindow) -> dict:
    """The window's parts of the profile, as the assembly writes them (plain data)."""
    result = probe.result()
    doc: dict = {"warnings": list(result.errors)}
    if result.trace_file is not None:
        doc["trace_files"] = [str(result.trace_file)]
    if result.info is not None:
        doc["trace"] = {"profiler_window": msgspec.to_builtins(result.info)}
    return doc


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA behaviour")
def test_without_cuda_it_does_nothing_and_says_so(tmp_path: Path) -> None:
    doc = _drive(ProfilerWindow(), tmp_path, steps=6)
    assert "trace_files" not in doc
    assert "no CUDA device" in doc["trace"]["profiler_window"]["note"]
    assert not (tmp_path / TRACE_NAME).exists()


def test_window_follows_the_recorder_window(tmp_path: Path) -> None:
    """Recorder window = steps 1-2, so the profiler takes steps 3-4 (Python modes would stretch
    the gaps it measures)."""
    probe = ProfilerWindow(require_cuda=False)
    doc = _drive(probe, tmp_path, steps=7, window_start=1, window_steps=2)
    path = tmp_path / TRACE_NAME
    assert doc["trace_files"] == [str(path)]
    assert doc["trace"]["profiler_window"]["start_step"] == 3
    assert doc["trace"]["profiler_window"]["steps"] == 2
    events = _events(path)
    steps = sorted(e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#"))
    # and an empty one for the trace analyses' last-step rule to drop
    assert steps == ["ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"]
    adds = [e for e in events if e.get("name") == "aten::add" and e.get("ph") == "X"]
    assert len(adds) == 4 + 5  # steps 3 and 4 run 4 and 5 adds


def test_run_ending_inside_the_profiler_window_still_writes_the_trace(tmp_path: Path) -> None:
    probe = ProfilerWindow(require_cuda=False)
    doc = _drive(
        probe, tmp_path, steps=3, window_start=1, window_steps=3
    )  # profiler from step 4: never reached
    assert "trace_files" not in doc
    probe2 = ProfilerWindow(require_cuda=False)
    doc2 = _drive(
        probe2, tmp_path / "b", steps=5, window_start=1, window_steps=3
    )  # step 4 ends; 5 and 6 never run
    assert doc2["trace_files"] == [str(tmp_path / "b" / TRACE_NAME)]
    assert doc2["trace"]["profiler_window"]["steps"] == 1
    assert _measured_steps(tmp_path / "b" / TRACE_NAME) == 1  # the step the end cut, dropped


def _measured_steps(path: Path) -> int:
    """How many steps the trace analyses (``gpuopt report``, the profile's window) measure."""
    from gpuopt.trace.analysis import analyze_columns
    from gpuopt.trace.decode import load_columns

    return len(analyze_columns(load_columns(path), 0, None, str(path)).measured_steps)


def test_a_complete_window_keeps_all_its_steps_for_the_trace_analyses(tmp_path: Path) -> None:
    """The trace analyses drop a trace's last ProfilerStep (HTA's rule: the profiler usually cuts
    it off), which would read a window of three steps as two. A window whose last step
    ended adds an empty step for the rule to drop."""
    doc = _drive(ProfilerWindow(require_cuda=False), tmp_path, steps=7, window_steps=3)
    assert doc["trace"]["profiler_window"]["steps"] == 3
    assert _measured_steps(tmp_path / TRACE_NAME) == 3


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="kernels in the trace need a CUDA device; not faked"
)
def test_gpu_trace_has_kernels(tmp_path: Path) -> None:
    probe = ProfilerWindow()
    probe.start(context(tmp_path, window_start=0, window_steps=2))
    a = torch.ones(1024, device="cuda")
    for i in range(5):
        a = a * 1.0001 + 1
        probe.on_step(i, time.perf_counter())
    probe.stop()
    doc = _document(probe)
    events = _events(Path(doc["trace_files"][0]))
    assert any(e.get("cat") == "kernel" for e in events)
