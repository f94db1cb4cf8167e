"""Where gpuopt's trace numbers depart from HTA 0.5.0's because HTA's are wrong
(docs/trace-metrics.md, "Where gpuopt differs from HTA"): host spans that are not GPU work, a GPU
that runs behind the host, an annotation that would take all the idle blame; and the smaller
cases seen on public traces (AMD TraceLens' test traces, MIT)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from conftest import DATA, SHARED_TRACES, public_file
from trace_helpers import cpu, kernel, launch, write_trace

from gpuopt.assemble.trace_job import summarise_traces
from gpuopt.assemble.trace_profile import profile_from_traces
from gpuopt.errors import GpuoptError
from gpuopt.model.summary import RankSummary

RESNET = DATA / "public" / "tracelens" / "resnet_act_checkpoint.json.gz"
FLUX = SHARED_TRACES / "tracelens" / "xdit_flux.1_aiter_sage" / "capture_trace_rank_0.json.gz"


def _one(path: Path) -> RankSummary:
    (ra,) = summarise_traces(path, jobs=1)
    return ra


# ------------------------------------------------------------- host spans are never GPU work


def _triton_host_record(tmp_path: Path) -> Path:
    """Inductor's host record of a Triton launch (a ``cpu_op`` with an integer ``stream`` arg,
    no correlation) around the launch of the kernel it names, as in the Flux.1 capture trace."""
    ev = [
        cpu("triton_poi_fused_add_0", 0, 40, stream=0),
        launch(10, 5, corr=1),
        kernel("triton_poi_fused_add_0", 50, 10, corr=1, stream=0),
        launch(100, 5, corr=2),
        kernel("gemm", 110, 10, corr=2, stream=0),
    ]
    return write_trace(tmp_path / "triton.json", ev)


def test_a_host_record_with_a_stream_arg_is_not_gpu_work(tmp_path: Path) -> None:
    t = _one(_triton_host_record(tmp_path)).trace
    assert t.temporal is not None
    # HTA: span [0, 120), busy 40 + 10 + 10 = 50%; the GPU's own work: [50, 120), 20 of 70
    assert t.temporal.span_us == 70 and t.temporal.busy_us == 20
    counts = {k.name: k.count for k in t.top_kernels}
    assert counts == {"triton_poi_fused_add_0": 1, "gemm": 1}  # HTA: 2 (the kernel + its record)
    assert [s.stream for s in t.streams] == [0] and t.streams[0].events == 2


def test_the_flux_capture_trace_counts_only_its_kernels() -> None:
    """TraceLens' xDiT Flux.1 capture (MIT): 1063 Inductor host records with a stream arg; HTA's
    busy share 12.37%, the GPU's own 9.79%."""
    t = _one(public_file(FLUX)).trace
    assert t.temporal is not None and t.temporal.utilization is not None
    assert 100 * t.temporal.utilization == pytest.approx(9.79, abs=0.01)
    assert all(not k.name.startswith("triton_") or k.count <= 152 for k in t.top_kernels)


# --------------------------------------------------------------- a GPU that runs behind the host


def _behind(tmp_path: Path) -> Path:
    """Modelled on TraceLens' DDP ResNet trace (MI300, activation checkpointing): GPU work
    queued before the trace (no launch in it) keeps the GPU busy for 30 ms; three host steps of
    16 ms each launch 19 ms of GPU work, which runs only after the earlier work."""
    ev: list[dict[str, object]] = []
    # queued before the trace: 30 kernels of 1 ms, [0, 30) ms, launched by nothing recorded
    ev += [kernel("queued", 1000 * i, 1000, corr=10_000 + i) for i in range(30)]
    gpu_at = 30_000.0
    corr = 1
    for n, host in ((15, 0.0), (16, 16_000.0), (17, 32_000.0)):
        ev.append(cpu(f"ProfilerStep#{n}", host, 16_000, cat="user_annotation"))
        for j in range(19):  # 19 launches a step, 1 ms of GPU work each
            ev.append(launch(host + 100 + 800 * j, 20, corr=corr))
            ev.append(kernel("conv", gpu_at, 1000, corr=corr))
            gpu_at += 1000
            corr += 1
    return write_trace(tmp_path / "behind.json", ev)


def test_a_gpu_behind_the_host_is_measured_by_what_each_step_launched(tmp_path: Path) -> None:
    p = profile_from_traces(_behind(tmp_path))
    assert not isinstance(p.trace, msgspec.UnsetType) and isinstance(p.trace.ranks, list)
    (rank,) = p.trace.ranks
    lag = rank.gpu_lag
    assert not isinstance(lag, msgspec.UnsetType)
    assert lag.steps == 2 and lag.queued_before == 30
    assert (lag.lag_min_us, lag.lag_max_us) == (30_000, 33_000)
    assert lag.gpu_step_us == 19_000 and lag.host_step_us == 16_000
    # before: step 15 ran from its host start to its GPU work's end (49 ms), step 16 was pushed
    assert [(s.step, s.dur_us) for s in rank.steps] == [(15, 19_000), (16, 19_000)]
    assert p.steps.time_s.median == pytest.approx(0.019)
    assert (
        "rank 0: the GPU runs behind the host: each step's GPU work started 30.0-33.0 ms after "
        "its host step began; 30 GPU events were queued before the trace began; steps are "
        "measured by the GPU work each one launched: 19.00 ms a step on the GPU (median), "
        "16.00 ms on the host"
    ) in p.warnings


def _checkpointed_ddp(tmp_path: Path) -> Path:
    """gpuopt's own trace in the shape of a DDP ResNet with activation checkpointing that runs
    behind its host (as AMD TraceLens' MI300 trace does): 40 kernels queued before the trace
    keep the GPU busy for its first 30 ms; each 16 ms host step launches its forward (8 convs),
    under ``CheckpointFunctionBackward`` the same forward again (recomputed) and its backward
    (8 convs), and an all-reduce: 20.8 ms of GPU work, run only after the earlier work."""
    ev: list[dict[str, object]] = []
    ev += [kernel("queued_conv", 750 * i, 750, corr=50_000 + i) for i in range(40)]
    gpu_at, corr = 30_000.0, 1

    def run(host: float, name: str, dur: float, stream: int = 7) -> None:
        nonlocal gpu_at, corr
        ev.append(launch(host, 20, corr=corr))
        ev.append(kernel(name, gpu_at, dur, corr=corr, stream=stream))
        gpu_at += dur
        corr += 1

    for n, host in ((15, 0.0), (16, 16_000.0), (17, 32_000.0)):
        ev.append(cpu(f"ProfilerStep#{n}", host, 16_000, cat="user_annotation"))
        ev.append(cpu("aten::conv2d", host + 100, 3_000))
        for j in range(8):
            run(host + 150 + 350 * j, "conv_fwd", 700)
        ev.append(cpu("CheckpointFunctionBackward", host + 4_000, 9_000))
        for j in range(8):  # recompute, then the backward
            run(host + 4_100 + 500 * j, "conv_fwd", 700)
            run(host + 4_300 + 500 * j, "conv_bwd", 1_000)
        ev.append(cpu("nccl:all_reduce", host + 14_000, 500, cat="user_annotation"))
        run(host + 14_100, "ncclDevKernel_AllReduce", 1_600, stream=9)
    return write_trace(tmp_path / "checkpointed.json", ev)


def test_a_checkpointed_ddp_trace_s_steps_are_the_gpu_s_cadence(tmp_path: Path) -> None:
    """Host windows would make step 15 50.8 ms (its host start to its GPU work's end) and push
    step 16; measured by the GPU work each step launched, both are 20.8 ms."""
    ra = _one(_checkpointed_ddp(tmp_path))
    lag = ra.trace.gpu_lag
    assert not isinstance(lag, msgspec.UnsetType)
    assert (lag.steps, lag.queued_before) == (2, 40)
    assert (lag.lag_min_us, lag.lag_max_us) == (30_000, 34_800)
    assert (lag.gpu_step_us, lag.host_step_us) == (20_800, 16_000)
    assert [(s.step, s.dur_us) for s in ra.trace.steps] == [(15, 20_800), (16, 20_800)]
    busy = [s.kernel_us + s.communication_us for s in ra.trace.steps]
    assert busy == pytest.approx([s.dur_us for s in ra.trace.steps])  # the GPU is never idle
    counts = {k.name: k.count for k in ra.trace.top_kernels}
    assert counts["conv_fwd"] == 2 * counts["conv_bwd"]  # the forward, and its recompute
    assert ra.warnings[-1].startswith(
        "the GPU runs behind the host: each step's GPU work started 30.0-34.8 ms after its "
        "host step began; 40 GPU events were queued before the trace began"
    )


def test_the_resnet_trace_s_steps_are_the_gpu_s_cadence() -> None:
    """TraceLens' DDP ResNet trace (MI300X, rank 0 of 8, three profiler steps; set up from its
    snapshot: tests/data/public.toml). With windows from the host steps, step 15 was 49.06 ms
    for a 16.80 ms host step and step 16 began 32.2 ms after its own (median 34.0 ms, 2.08x the
    host's 16.37 ms)."""
    ra = _one(public_file(RESNET))
    lag = ra.trace.gpu_lag
    assert not isinstance(lag, msgspec.UnsetType)
    assert (lag.steps, lag.queued_before) == (2, 968)
    assert (lag.lag_min_us, lag.lag_max_us) == (30_082, 32_242)
    assert (lag.gpu_step_us, lag.host_step_us) == (18_981, 16_374)
    assert [(s.step, s.dur_us) for s in ra.trace.steps] == [(15, 18_980), (16, 18_982)]
    assert all(s.cpu_op_us < 1_000 for s in ra.trace.steps)  # was 25.3 ms in one, 0.5 in the next
    assert ra.warnings[-1].startswith(
        "the GPU runs behind the host: each step's GPU work started 30.1-32.2 ms after its "
        "host step began; 968 GPU events were queued before the trace began"
    )


def test_a_gpu_that_keeps_up_keeps_the_host_steps(tmp_path: Path) -> None:
    ev = [
        cpu("ProfilerStep#1", 0, 100, cat="user_annotation"),
        cpu("ProfilerStep#2", 100, 100, cat="user_annotation"),
        cpu("ProfilerStep#3", 200, 100, cat="user_annotation"),
        launch(10, 5, corr=1),
        kernel("gemm", 20, 50, corr=1),
        launch(110, 5, corr=2),
        kernel("gemm", 120, 50, corr=2),
    ]
    t = _one(write_trace(tmp_path / "even.json", ev)).trace
    assert t.gpu_lag is msgspec.UNSET
    assert [(s.step, s.dur_us) for s in t.steps] == [(1, 100), (2, 100)]


def test_one_step_whose_work_runs_after_it_is_no_lag(tmp_path: Path) -> None:
    """HTA's trace_compare fixture: the one measured step launches its kernel in its last µs,
    which runs 57 ms later: a step, not a cadence (not 4 µs of GPU work)."""
    t = _one(SHARED_TRACES / "hta" / "trace_compare" / "base" / "base.json.gz").trace
    assert t.gpu_lag is msgspec.UNSET
    assert [(s.step, s.dur_us) for s in t.steps] == [(1009, 157_408)]


# ------------------------------------------------------------ an annotation is a container


def test_an_enclosing_annotation_does_not_take_the_idle_blame(tmp_path: Path) -> None:
    """Modelled on TraceLens' SD3.5 trace: ``record_function("model_inference")`` spans the run;
    HTA-style first-match credited it all idle time as cpu_op (97% there)."""
    ev = [
        cpu("model_inference", 0, 1000, cat="user_annotation"),
        cpu("run.py(10): main", 0, 1000, cat="python_function"),
        cpu("gen.py(5): call", 200, 300, cat="python_function"),
        launch(10, 5, corr=1),
        kernel("gemm", 20, 80, corr=1),
        launch(595, 5, corr=2),
        kernel("gemm", 600, 100, corr=2),
    ]
    ic = _one(write_trace(tmp_path / "annotated.json", ev)).trace.idle_causes
    assert ic.idle_us == 500  # the gap [100, 600)
    assert ic.by_cause.launch == 5 and ic.by_cause.cpu_op == 0
    assert ic.by_cause.python == 495
    top = ic.sites[0]  # the innermost user frame inside the annotation
    assert (top.cause, top.site, top.idle_us) == ("python", "gen.py:5", 300)


def test_an_annotation_with_nothing_inside_is_cpu_op_named_innermost(tmp_path: Path) -> None:
    ev = [
        cpu("outer", 0, 1000, cat="user_annotation"),
        cpu("inner", 300, 100, cat="user_annotation"),
        launch(10, 5, corr=1),
        kernel("gemm", 20, 80, corr=1),
        launch(595, 5, corr=2),
        kernel("gemm", 600, 100, corr=2),
    ]
    ic = _one(write_trace(tmp_path / "nested.json", ev)).trace.idle_causes
    assert ic.by_cause.cpu_op == 495
    assert {s.op: s.idle_us for s in ic.sites} == {"outer": 395, "inner": 100}


# ------------------------------------------------------------------------------ smaller cases


def test_identical_ranks_have_no_straggler(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    ev = [
        cpu("ProfilerStep#1", 0, 100, cat="user_annotation"),
        launch(10, 5, corr=1),
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 20, 50, corr=1),
    ]
    for r in range(4):
        write_trace(folder / f"rank{r}.json", ev, rank=r, distributedInfo={"rank": r})
    p = profile_from_traces(folder)
    assert p.trace.straggler is None  # type: ignore[union-attr]
    (ranks,) = [t for t in p.tables if t.id == "trace-ranks"]
    assert [row[-1] for row in ranks.rows] == [False] * 4
    assert "straggler-rank" not in {f.id for f in p.findings}


def test_a_subfolder_of_traces_is_named_not_read(tmp_path: Path) -> None:
    top = tmp_path / "xdit_flux.1"
    (top / "capture_traces").mkdir(parents=True)
    capture = [launch(5, 3, corr=1), kernel("k", 10, 5, 1)]  # as TraceLens' capture_traces/ hold
    write_trace(top / "capture_traces" / "capture_trace_rank_0.json", capture)
    with pytest.raises(GpuoptError, match=r"traces in its subfolders: .*capture_traces$"):
        profile_from_traces(top)
    write_trace(top / "profile_trace_rank_0.json", [launch(5, 3, corr=1), kernel("k", 10, 5, 1)])
    p = profile_from_traces(top)
    assert p.warnings[0] == (
        "1 trace file in subfolders not read (a folder is one job's per-rank traces; report a "
        f"subfolder on its own): {top / 'capture_traces'}"
    )


def test_a_short_gpu_span_is_explained(tmp_path: Path) -> None:
    """An inference capture: the GPU busy all its own (short) span, idle the rest of the step:
    a headline 'GPU 100%' beside 'compute 0.0%' said why."""
    ev = [
        cpu("ProfilerStep#1", 0, 100_000, cat="user_annotation"),
        launch(50_000, 5, corr=1),
        kernel("gemm", 50_010, 90, corr=1),
    ]
    p = profile_from_traces(write_trace(tmp_path / "capture.json", ev))
    assert p.gpu is not None and p.gpu[0].utilization == 1.0
    assert (
        "rank 0: the GPU's work spans 0.09 ms of the 100 ms measured (0.1%): its utilization, "
        "100.0%, is of that span; over the measured time the GPU was busy 0.1%"
    ) in p.warnings


def test_a_gpu_side_annotation_of_another_step_does_not_drop_the_host_step(
    tmp_path: Path,
) -> None:
    """Kineto's GPU-side ``ProfilerStep#4`` (the GPU still running the previous step) beside the
    only host step, #5: HTA's last-step rule counts host annotations only."""
    ev = [
        cpu("ProfilerStep#5", 0, 100, cat="user_annotation"),
        {**cpu("ProfilerStep#4", 10, 30, cat="gpu_user_annotation"), "pid": 0},
        launch(10, 5, corr=1),
        kernel("gemm", 20, 50, corr=1),
    ]
    ra = _one(write_trace(tmp_path / "gpu_step.json", ev))
    assert ra.step_names == ["ProfilerStep#5"] and not ra.filtered_last_step
    assert ra.trace.profiler_steps == [5] and ra.trace.dropped_last_step is None
