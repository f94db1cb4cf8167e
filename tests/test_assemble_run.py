"""Assembling a run's Profile from what its probes returned: what a probe's failure costs (its
own parts, never the profile), and that nothing a part reports is dropped."""

from __future__ import annotations

from pathlib import Path

import pytest
from trace_helpers import cpu, write_trace

import gpuopt.assemble.run_profile as run_profile
from gpuopt.assemble.run_profile import assemble_run
from gpuopt.assemble.run_record import RunRecord
from gpuopt.model.outcome import Outcome
from gpuopt.model.profile import Environment
from gpuopt.model.trace import ProfilerWindowInfo
from gpuopt.probes.dataloader import DataLoaderWaits
from gpuopt.probes.profiler_window import WindowResult
from gpuopt.probes.recorder import RecorderCapture


def _record(**parts: object) -> RunRecord:
    ends = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    fields: dict[str, object] = {
        "script": "train.py",
        "argv": [],
        "cwd": "/w",
        "started_at": "2026-11-23T00:00:00+00:00",
        "rank": None,
        "warmup": 2,
        "t_start": 0.0,
        "t_end": 6.5,
        "outcome": Outcome("ok", 0),
        "environment": Environment(python="3.11", cpu_count=2),
        "step_ends": ends,
        "step_sources": {"optimizer.step"},
        "instrumented": set(),
        "loaders": DataLoaderWaits([], {}, None),
        "utilization": None,
        "recorder": None,
        "window": None,
    }
    fields.update(parts)
    return RunRecord(**fields)  # type: ignore[arg-type]


def test_a_plain_run() -> None:
    p = assemble_run(_record())
    assert (p.steps.count, p.steps.measured, p.steps.time_s.median) == (6, 4, 1.0)
    assert p.breakdown.compute == 1.0 and p.warnings == []


def test_a_recorder_summary_that_fails_costs_its_parts_not_the_profile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("a source file vanished")

    monkeypatch.setattr(run_profile, "summarize", broken)
    capture = RecorderCapture(
        enabled=True,
        off=False,
        window_start=2,
        snapshot=None,
        calibration=None,
        unfinished=False,
        next_step=6,
        shapes=None,
    )
    p = assemble_run(_record(recorder=capture))
    assert p.status == "ok" and p.steps.count == 6
    assert p.warnings == ["probe recorder could not report: RuntimeError: a source file vanished"]
    assert p.dispatch.ops_per_step is None


def test_the_window_traces_warnings_are_kept(tmp_path: Path) -> None:
    """A CUDA machine whose script trains on the CPU: the window's trace has no GPU events, and
    the profile says so (the trace's own warning is not lost among the run's)."""
    trace = write_trace(
        tmp_path / "w.json", [cpu("ProfilerStep#0", 0, 100), cpu("aten::add", 10, 5)]
    )
    window = WindowResult(
        ProfilerWindowInfo(file="w.json", cuda=True, start_step=5, steps=1), trace, []
    )
    p = assemble_run(_record(window=window, instrumented={5}))
    no_gpu = "no GPU events (kernels, copies, sets on a stream) in the trace: GPU metrics are empty"
    assert any(w.endswith(no_gpu) for w in p.warnings), p.warnings
    assert p.trace_files == [str(trace)]


def test_an_unreadable_window_trace_is_a_warning(tmp_path: Path) -> None:
    bad = tmp_path / "w.json"
    bad.write_text("{not json")
    p = assemble_run(_record(window=WindowResult(None, bad, ["profiler window: stopped late"])))
    assert p.warnings[0] == "profiler window: stopped late"
    assert any(w.startswith("profiler window trace not analysed: ") for w in p.warnings)
