"""Damaged and hostile traces: each anomaly is repaired with a one-line warning or
refused with a one-line error (docs/trace-metrics.md, "Damaged traces"), and no profile holds an
impossible number."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from trace_helpers import copy, cpu, impossible_numbers, kernel, launch, write_trace

from gpuopt.assemble.trace_job import job_of, summarise_traces
from gpuopt.errors import GpuoptError
from gpuopt.loading import load
from gpuopt.model.document import validate
from gpuopt.model.profile import Profile


def _training(n: int = 12, offset: float = 0, streams: int = 1) -> list[dict[str, Any]]:
    """Two profiler steps of ``n`` ops, each launching one kernel (30 µs apart)."""
    ev = [
        cpu("ProfilerStep#1", offset, 30 * n, cat="user_annotation"),
        cpu("ProfilerStep#2", offset + 30 * n, 30 * n, cat="user_annotation"),
    ]
    for i in range(2 * n):
        t = offset + 15 * i
        ev += [
            cpu("aten::mm", t, 10),
            launch(t + 1, 4, corr=i + 1),
            kernel(f"gemm{i % 3}", t + 8, 6, corr=i + 1, stream=7 + i % streams),
        ]
    return ev


def _sound(profile: Profile) -> Profile:
    """``profile``, after checking it is valid and holds no impossible number."""
    assert validate(profile) == []
    assert impossible_numbers(msgspec.to_builtins(profile)) == []
    return profile


def _load(path: Path) -> Profile:
    return _sound(load(path))


def _error(path: Path) -> str:
    with pytest.raises(GpuoptError) as ei:
        load(path)
    msg = str(ei.value)
    assert "\n" not in msg and str(path) in msg
    return msg


def _gpu(profile: Profile) -> Any:
    assert profile.gpu
    return msgspec.to_builtins(profile.gpu[0])


# --------------------------------------------------------------------------- repaired


def test_negative_durations_are_dropped_with_a_warning(tmp_path: Path) -> None:
    ev = _training()
    bad = [dict(e, dur=-e["dur"]) if e["name"] == "gemm1" else e for e in ev]
    p = _load(write_trace(tmp_path / "neg.json", bad))
    assert any("dropped 8 events with a negative duration" in w for w in p.warnings)
    gpu = _gpu(p)
    assert 0 <= gpu["idle_pct"] <= 100 and 0 <= gpu["utilization"] <= 1


def test_negative_durations_only_is_an_error(tmp_path: Path) -> None:
    ev = [dict(e, dur=-1) for e in _training()]
    msg = _error(write_trace(tmp_path / "allneg.json", ev))
    assert "nothing to analyse" in msg and "negative duration" in msg


def test_zero_durations_are_kept_without_warning(tmp_path: Path) -> None:
    ev = [*_training(), launch(100, 2, corr=99), kernel("instant", 105, 0, corr=99)]
    p = _load(write_trace(tmp_path / "zero.json", ev))
    assert p.warnings == []
    names = {r[2]: r[3] for t in p.tables if t.id == "trace-top-kernels" for r in t.rows}
    assert names["instant"] == 1  # counted, adds no time


def test_every_event_three_times_gives_the_numbers_of_once(tmp_path: Path) -> None:
    ev = _training()
    once = _load(write_trace(tmp_path / "once.json", ev))
    for name, events in (
        ("thrice.json", ev * 3),
        ("each.json", [e for e in ev for _ in (0, 1, 2)]),
    ):
        p = _load(write_trace(tmp_path / name, events))
        assert _gpu(p) == _gpu(once)  # launch count, idle and kernel wait as once
        assert any("dropped 96 duplicate events" in w for w in p.warnings), p.warnings


def test_nested_ops_that_look_alike_are_not_duplicates(tmp_path: Path) -> None:
    # aten::zeros inside aten::zeros, same µs: real traces have them (trace_diff/test.json.gz)
    ev = _training()
    plain = _load(write_trace(tmp_path / "plain.json", ev))
    nested = [*ev, cpu("aten::zeros", 100, 2), cpu("aten::zeros", 100, 2)]
    p = _load(write_trace(tmp_path / "nested.json", nested))
    assert p.warnings == []
    n = plain.trace.ranks[0].events_analysed  # type: ignore[union-attr]
    assert p.trace.ranks[0].events_analysed == n + 2  # type: ignore[union-attr]


def test_overlapping_kernels_on_one_stream_give_no_negative_wait(tmp_path: Path) -> None:
    ev = [
        launch(0, 2, corr=1),
        kernel("a", 10, 100, corr=1),
        launch(3, 2, corr=2),
        kernel("b", 50, 100, corr=2),  # starts 60 µs before a ends: a stream cannot
        launch(6, 2, corr=3),
        kernel("c", 60, 10, corr=3),  # inside b
        launch(9, 2, corr=4),
        kernel("d", 170, 10, corr=4),
    ]
    p = _load(write_trace(tmp_path / "overlap.json", ev))
    assert any("2 GPU events start before the work queued" in w for w in p.warnings)
    idle = p.trace.ranks[0].idle_by_stream[0]  # type: ignore[union-attr]
    # the one real gap, 150 -> 170; HTA's sum is 20 - 60 - 90 + 110 = -20 µs
    assert idle.kernel_wait == 20 and idle.host_wait == 0 and idle.other == 0


def test_clock_skew_between_ranks_leaves_out_the_straggler(tmp_path: Path) -> None:
    def collectives(offset: float, late: float) -> list[dict[str, Any]]:
        ev = _training(offset=offset)
        for i in range(3):
            t = offset + 100 * i + late
            ev += [
                launch(t, 2, corr=100 + i),
                kernel("ncclKernel_AllReduce", t + 5, 20, corr=100 + i, stream=20),
            ]
        return ev

    synced, skewed = tmp_path / "synced", tmp_path / "skewed"
    for folder, offset in ((synced, 0.0), (skewed, 3.6e9)):  # an hour off
        folder.mkdir()
        write_trace(folder / "r0.json", collectives(0, 0), rank=0)
        write_trace(folder / "r1.json", collectives(offset, 7), rank=1)
    ok = _load(synced)
    assert ok.trace.straggler is not None and ok.warnings == []  # type: ignore[union-attr]
    bad = _load(skewed)
    assert bad.trace.straggler is None  # type: ignore[union-attr]
    assert any("ranks 0, 1: no event at the same time" in w for w in bad.warnings)
    assert bad.gpu == ok.gpu  # each rank's own numbers do not depend on the other's clock


def test_submicrosecond_memsets_in_a_ns_trace_keep_non_compute_non_negative(
    tmp_path: Path,
) -> None:
    # 22 memsets shorter than 1 µs, rounded inward, give an H100 trace a non-compute share -0.034%
    ev = [launch(0.5, 1.25, corr=1), kernel("gemm", 10.5, 100.0, corr=1)]
    for i in range(22):
        ev += [
            launch(2.5 + i, 0.5, corr=10 + i, name="cudaMemsetAsync"),
            copy("Memset (Device)", 200.3 + 10 * i, 0.4, corr=10 + i),
        ]
    ev += [launch(3.5, 1.0, corr=2), kernel("gemm", 500.5, 100.0, corr=2)]
    p = _load(write_trace(tmp_path / "ns.json", ev))
    gpu = _gpu(p)
    assert gpu["non_compute_pct"] == 0.0 and gpu["compute_pct"] + gpu["idle_pct"] == 100.0
    memsets = [r for t in p.tables if t.id == "trace-memory" for r in t.rows]
    assert memsets[0][1] == "Memset" and memsets[0][4] == 0.0  # zero length, not negative


def test_events_without_a_usable_time_are_dropped_with_a_warning(tmp_path: Path) -> None:
    no_ts = {k: v for k, v in cpu("aten::add", 0, 5).items() if k != "ts"}
    far = cpu("aten::add", 1e20, 5)
    p = _load(write_trace(tmp_path / "times.json", [*_training(), no_ts, far]))
    assert any("dropped 2 events without a usable time" in w for w in p.warnings), p.warnings


def test_impossible_byte_counts_are_unknown(tmp_path: Path) -> None:
    ev = [
        *_training(),
        launch(600, 2, corr=50, name="cudaMemcpyAsync"),
        copy("Memcpy HtoD (Pinned -> Device)", 610, 10, corr=50, nbytes=9 * 10**18),
        launch(620, 2, corr=51, name="cudaMemcpyAsync"),
        copy("Memcpy HtoD (Pinned -> Device)", 640, 10, corr=51, nbytes=9 * 10**18),
    ]
    p = _load(write_trace(tmp_path / "bytes.json", ev))
    assert any("2 events with an impossible byte count" in w for w in p.warnings)
    assert _gpu(p)["memcpy"]["bytes"] == 0


def test_events_out_of_order_give_the_same_profile(tmp_path: Path) -> None:
    ev = [*_training(streams=2), copy("Memset (Device)", 900, 3, corr=77)]
    a = _load(write_trace(tmp_path / "sorted.json", ev))
    b = _load(write_trace(tmp_path / "reversed.json", ev[::-1]))
    assert b.warnings == [] and a.gpu == b.gpu and a.breakdown == b.breakdown
    assert a.trace.ranks[0].steps == b.trace.ranks[0].steps  # type: ignore[union-attr]


def test_analysis_warnings_reach_the_profile_window(tmp_path: Path) -> None:
    ev = _training()
    path = write_trace(tmp_path / "dup.json", ev + ev)
    ta = job_of(str(path), summarise_traces(path, jobs=1))  # as the profile's window reads it
    assert any("duplicate events" in w for w in ta.warnings)
