"""The profile built from traces (gpuopt.assemble), and the trace findings."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from conftest import SHARED_TRACES, public_file
from trace_helpers import cpu, kernel, launch, write_trace

from gpuopt.assemble.trace_profile import (
    add_trace_to_profile,
    profile_from_traces,
)
from gpuopt.findings.engine import add_findings
from gpuopt.model.document import decode, empty_profile, encode, validate
from gpuopt.model.profile import Profile
from gpuopt.model.trace import ProfilerWindowInfo, TraceDetails

GPU_KEYS = {
    "rank",
    "device",
    "utilization",
    "idle_pct",
    "compute_pct",
    "non_compute_pct",
    "idle_us",
    "launch",
    "memcpy",
    "comm_overlap_pct",
}
NW0 = (
    SHARED_TRACES
    / "kineto_tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
)
NW4 = (
    SHARED_TRACES
    / "kineto_tb_plugin/samples/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"
)


def analysed(path: Path) -> Profile:
    """The trace's profile with its findings, as gpuopt.load gives it."""
    return add_findings(profile_from_traces(path))


def _trace_details(p: Profile) -> TraceDetails:
    assert isinstance(p.trace, TraceDetails)
    return p.trace


def _dataloader_bound_trace(tmp_path: Path) -> Path:
    ev = [
        cpu("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        cpu("enumerate(DataLoader)#x.__next__", 20, 900, cat="user_annotation"),
        launch(5, 3, corr=1),
        kernel("gemm", 10, 5, corr=1),
        launch(930, 3, corr=2),
        kernel("gemm", 950, 40, corr=2),
    ]
    return write_trace(tmp_path / "t.json", ev)


def _window_trace(tmp_path: Path) -> Path:
    ev = [
        cpu("ProfilerStep#1", 0, 100, cat="user_annotation"),
        launch(5, 3, corr=1),
        kernel("gemm", 10, 50, corr=1),
    ]
    return write_trace(tmp_path / "w.json", ev)


@pytest.fixture(scope="module")
def nw0() -> Profile:
    return analysed(public_file(NW0))


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_document_is_valid_and_complete(nw0: Profile) -> None:
    assert validate(nw0) == [] and nw0.source == "trace"
    assert nw0.gpu is not None
    (g,) = nw0.gpu
    assert set(msgspec.to_builtins(g)) == GPU_KEYS  # the contract's keys, as written
    assert g.idle_pct == pytest.approx(39.43, abs=0.01) and g.device == "Tesla V100-DGXS-32GB"
    assert g.utilization == pytest.approx(1 - 0.3943, abs=1e-3)
    idle = g.idle_us
    assert None not in (idle.host_wait, idle.kernel_wait, idle.other)
    assert nw0.steps.count == 5 and len(nw0.steps.series) == 5 and nw0.ranks is None
    assert nw0.environment.python is None and nw0.utilization.cpu.mean is None
    bd = nw0.breakdown
    assert abs(sum(v for _, v in bd.items()) - 1) < 0.02 and bd.data_wait > 0.25
    ids = {t.id for t in nw0.tables}
    assert {
        "trace-gpu-time",
        "trace-idle-causes",
        "trace-step-breakdown",
        "trace-launch",
        "trace-memory",
        "trace-top-kernels",
    } <= ids
    for t in nw0.tables:
        assert t.rows and all(len(r) == len(t.columns) for r in t.rows), t.id
    (tr,) = [t for t in nw0.transfers if t.direction == "h2d"]
    assert tr.pinned is False and tr.count_per_step == 2.0
    assert tr.site == "resnet50_profiler_api.py:44"  # from the ops' "Call stack" (with_stack=True)
    assert {s.site for s in nw0.syncs} == {"resnet50_profiler_api.py:44"}
    assert nw0.utilization.gpu is not None
    assert nw0.utilization.gpu.mean == pytest.approx(60.57, abs=0.01)  # percent, like NVML


def test_findings_on_dataloader_bound_run(nw0: Profile) -> None:
    f = {x.id: x for x in nw0.findings}
    assert "dataloader-bound" in f and f["dataloader-bound"].severity == "high"
    assert f["dataloader-bound"].site == "resnet50_profiler_api.py:42"
    assert "pageable-h2d" in f and f["pageable-h2d"].evidence["count"] == 10
    assert f["pageable-h2d"].site == "resnet50_profiler_api.py:44"
    ids = [x.id for x in nw0.findings]
    assert len(ids) == len(set(ids))  # run-time rules may fire on the same document: one per id
    assert f["dataloader-bound"].source == "trace" and f["pageable-h2d"].source == "trace"


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_no_dataloader_finding_with_workers() -> None:
    doc = analysed(public_file(NW4))
    assert "dataloader-bound" not in {x.id for x in doc.findings}


def test_two_ranks_give_ranks_and_straggler() -> None:
    doc = analysed(public_file(SHARED_TRACES / "hta" / "trace_filter"))
    assert validate(doc) == []
    assert doc.ranks is not None and doc.gpu is not None
    assert [r.rank for r in doc.ranks] == [0, 1] and [g.rank for g in doc.gpu] == [0, 1]
    assert all(isinstance(r.step_time_median_s, float) for r in doc.ranks)
    assert doc.gpu[1].comm_overlap_pct == pytest.approx(20.05, abs=0.5)
    s = {x.id: x for x in doc.findings}["straggler-rank"]
    straggler = _trace_details(doc).straggler
    assert straggler is not None and not isinstance(straggler, msgspec.UnsetType)
    assert s.evidence["rank"] == straggler.rank
    assert set(straggler.mean_lateness_us) == {0, 1}
    assert any(t.id == "trace-ranks" for t in doc.tables)


@pytest.mark.parametrize(
    "rel",
    [
        "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
        "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        "hta/rank_unavailable/rank_not_found.json.gz",
        "hta/mtia_inference_trace/mtia_inference_rank_0.json.gz",
    ],
)
def test_traces_hta_cannot_read_still_get_a_report(rel: str) -> None:
    doc = analysed(public_file(SHARED_TRACES / rel))
    assert validate(doc) == []


@pytest.mark.parametrize("rel", ["hta/trace_filter", "hta/nccl_parser_config/nccl_data.json.gz"])
def test_the_typed_profile_is_what_its_json_reads_back(rel: str) -> None:
    """Built in memory, the profile holds exactly what its JSON says (no numpy numbers, NaN,
    tuples or keys the document would lose), so ``report`` shows what ``--format json`` writes."""
    doc = analysed(public_file(SHARED_TRACES / rel))
    assert decode(encode(doc), rel) == doc


def test_the_typed_profile_of_a_small_trace_is_what_its_json_reads_back(tmp_path: Path) -> None:
    doc = analysed(_dataloader_bound_trace(tmp_path))
    assert decode(encode(doc), "t.json") == doc


def test_trace_rules_do_not_fire_on_run_documents(tmp_path: Path) -> None:
    doc = analysed(_dataloader_bound_trace(tmp_path))
    assert "dataloader-bound" in {x.id for x in doc.findings}
    from gpuopt.findings.rules import gpu_trace

    run_doc = msgspec.structs.replace(doc, source="run")
    assert gpu_trace.dataloader_bound(run_doc) == [] and gpu_trace.sync_in_step(run_doc) == []
    # ids no run-time rule produces still fire from a run's profiler-window trace
    assert [f.id for f in gpu_trace.low_gpu_util(run_doc)] == ["low-gpu-util"]


def test_add_trace_to_a_run_profile(tmp_path: Path) -> None:
    profile = empty_profile("train.py")
    window = ProfilerWindowInfo(steps=1)
    profile.trace = TraceDetails(profiler_window=window)
    profile.warnings = ["an earlier warning"]
    add_trace_to_profile(profile, _window_trace(tmp_path))
    assert validate(profile) == [] and profile.source == "run"
    assert profile.gpu is not None and profile.gpu[0].compute_pct == 100.0
    trace = _trace_details(profile)
    assert trace.profiler_window == window and not isinstance(trace.ranks, msgspec.UnsetType)
    assert trace.ranks[0].rank == 0 and trace.straggler is None
    assert any(t.id == "trace-gpu-time" for t in profile.tables)
    assert profile.warnings == ["an earlier warning"]  # the trace has steps and GPU events
    assert profile.steps.count == 0 and profile.findings == []  # the run's own, untouched


def _stripped_kernels_trace(tmp_path: Path) -> Path:
    """Two steps whose kernels lost their stream and correlation ids (a trimmed trace)."""
    stripped = [kernel("gemm", 10, 5, corr=1), kernel("gemm", 950, 40, corr=2)]
    for k in stripped:
        k["args"] = {"device": 0}
    ev = [
        cpu("ProfilerStep#1", 0, 500, cat="user_annotation"),
        cpu("ProfilerStep#2", 500, 500, cat="user_annotation"),
        cpu("ProfilerStep#3", 1000, 500, cat="user_annotation"),
        *stripped,
    ]
    return write_trace(tmp_path / "stripped.json", ev)


def test_kernels_without_a_stream_are_said_dropped_not_called_cpu_only(tmp_path: Path) -> None:
    p = profile_from_traces(_stripped_kernels_trace(tmp_path))
    assert p.warnings == [
        "rank 0: 2 kernel/copy events without a stream id (a trimmed trace?): not counted as "
        "GPU work",
        "rank 0: no GPU events (kernels, copies, sets on a stream) in the trace: GPU metrics are "
        "empty",
    ]
    (steps,) = [t for t in p.tables if t.id == "trace-step-breakdown"]
    assert [r[1] for r in steps.rows] == [1, 2] and steps.note == ""  # steps: no footnote


def test_the_step_table_footnote_is_for_a_trace_without_steps(tmp_path: Path) -> None:
    ev = [launch(5, 3, corr=1), kernel("gemm", 10, 50, corr=1)]
    p = profile_from_traces(write_trace(tmp_path / "nosteps.json", ev))
    (steps,) = [t for t in p.tables if t.id == "trace-step-breakdown"]
    assert [r[1] for r in steps.rows] == [None]
    assert steps.note == "Without ProfilerStep annotations the whole trace is one row (step empty)."
