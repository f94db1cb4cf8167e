"""Profiler steps come from the host's ``ProfilerStep#N`` annotations; a GPU-side annotation of
the same name (``gpu_user_annotation``: the span of the GPU work the step enclosed) is never a
step. gpuopt's own profiler window on an H200 wrote such a trace: its GPU ``ProfilerStep#0`` of
30.7 ms was taken as step 0 and step 1 became 0 s."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import H200_DIR, SHARED_TRACES, public_file
from trace_helpers import cpu, kernel, launch, write_trace

from gpuopt.assemble.trace_profile import profile_from_traces
from gpuopt.model.profile import Profile
from gpuopt.trace.decode import load_columns
from gpuopt.trace.prepare import build_view

H200_WINDOW = H200_DIR / "profiler-window.pt.trace.json.gz"


def _gpu_annotation(name: str, ts: float, dur: float) -> dict:
    """A ``gpu_user_annotation`` as Kineto writes it: on the device's pid and a stream's tid,
    with no ``stream`` argument."""
    return {
        "ph": "X",
        "cat": "gpu_user_annotation",
        "name": name,
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"External id": 1},
    }


def _step_times_ms(p: Profile) -> list[float]:
    assert p.steps.series is not None
    return [round(s.time_s * 1e3, 2) for s in p.steps.series]


def test_a_gpu_annotation_is_not_a_step(tmp_path: Path) -> None:
    """Three host steps of 10, 6 and 6 ms and the GPU's span of step 0's work (25 ms): steps
    0 and 1 measured (the last is dropped as HTA does), 10 and 6 ms, and the GPU span changes
    nothing."""
    ev = [
        cpu("ProfilerStep#0", 0, 10_000, cat="user_annotation"),
        cpu("ProfilerStep#1", 10_000, 6_000, cat="user_annotation"),
        cpu("ProfilerStep#2", 16_000, 6_000, cat="user_annotation"),
        launch(100, 5, corr=1),
        kernel("gemm", 200, 9_000, corr=1),
        launch(10_100, 5, corr=2),
        kernel("gemm", 10_200, 5_000, corr=2),
        launch(16_100, 5, corr=3),
        kernel("gemm", 16_200, 5_000, corr=3),
    ]
    plain = profile_from_traces(write_trace(tmp_path / "plain.json", ev))
    with_gpu = profile_from_traces(
        write_trace(tmp_path / "gpu.json", [*ev, _gpu_annotation("ProfilerStep#0", 150, 25_000)])
    )
    assert _step_times_ms(plain) == [10.0, 6.0]
    assert _step_times_ms(with_gpu) == _step_times_ms(plain)
    view = build_view(0, load_columns(tmp_path / "gpu.json"), filter_last_step=True)
    assert [s.number for s in view.steps] == [0, 1]
    assert [s.end - s.start for s in view.steps] == [10_000, 6_000]
    assert len({s.thread for s in view.steps}) == 1
    assert view.dropped_last_step is not None and view.dropped_last_step.number == 2


def test_the_h200_profiler_window_has_its_cpu_steps() -> None:
    """HTA's steps of that trace: 17.47 and 9.05 ms (the GPU annotation made them 30.7 and 0)."""
    p = profile_from_traces(H200_WINDOW)
    assert _step_times_ms(p) == pytest.approx([17.47, 9.05], abs=0.01)
    per_step = next(t for t in p.tables if t.title == "GPU idle causes per step (ms)")
    assert len(per_step.rows) == 2


def test_no_recorded_trace_takes_a_step_from_the_gpu() -> None:
    """Every recorded trace with a GPU-side ProfilerStep (the AMD MI250 one) keeps its host
    steps; its step times are the host annotations' (step 1: 9.29 ms there, HTA's one step)."""
    amd = public_file(SHARED_TRACES / "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    view = build_view(0, load_columns(amd), filter_last_step=True)
    cats = load_columns(amd)
    host_threads = {
        int(cats.thread[i])
        for i in range(len(cats))
        if cats.cats[int(cats.cat[i])] == "user_annotation"
    }
    assert [s.number for s in view.steps] == [1]
    assert all(s.thread in host_threads for s in view.steps)
    assert round((view.steps[0].end - view.steps[0].start) / 1e3, 2) == 9.29
