"""Distributed runs, in this process and without a launcher: the collective timers (host and NCCL,
the NCCL one with fake works), the collectives probe on a one-rank gloo group (explicit calls,
async works, DDP's timed hook, the NCCL path's blocking call), the merge of rank documents (the
wait/communicate split, missing and failed ranks, the job's status), the Ring-AllReduce model,
the distributed rules, torchrun's options and the run directories of multi-node jobs. The real
multi-process runs are in tests/test_distributed_runs.py."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gpuopt.assemble.distributed_run import distributed_record, step_collective_s
from gpuopt.assemble.rank_merge import measured_steps, merge_ranks, merged_status
from gpuopt.assemble.ring_model import fit_latency, nominal_link, ring_allreduce
from gpuopt.errors import GpuoptError
from gpuopt.findings.engine import add_findings, evaluate
from gpuopt.loading import job_ranks
from gpuopt.model.document import decode, empty_profile, encode
from gpuopt.model.profile import (
    Breakdown,
    DdpModel,
    DistributedRun,
    GpuInfo,
    Profile,
    RunError,
    StepRecord,
    StragglerEvidence,
)
from gpuopt.probes.collective_timing import HostTimer, NcclTimer, Timed
from gpuopt.probes.collectives import CollectiveProbe
from gpuopt.probes.protocol import RunContext
from gpuopt.runner.options import ProfileOptions, TorchrunOptions
from gpuopt.runner.run_dir import RunDirectory
from gpuopt.runner.torchrun import check_torchrun, torchrun_command
from gpuopt.script.target import Target

# -- timers ----------------------------------------------------------------------------------


class FakeFuture:
    def __init__(self) -> None:
        self.callbacks: list[Any] = []

    def add_done_callback(self, fn: Any) -> None:
        self.callbacks.append(fn)

    def finish(self) -> None:
        for fn in self.callbacks:
            fn(self)


class FakeWork:
    """An NCCL work as ProcessGroupNCCL hands it out: completes later, knows its GPU time."""

    def __init__(self, ms: float | None, completed: bool = True) -> None:
        self.ms, self.completed = ms, completed
        self.future = FakeFuture()

    def is_completed(self) -> bool:
        return self.completed

    def _get_duration(self) -> float:
        if self.ms is None:
            raise RuntimeError("Enable TORCH_NCCL_ENABLE_TIMING to read the duration")
        return self.ms

    def get_future(self) -> FakeFuture:
        return self.future

    def wait(self) -> None:
        pass


def test_the_host_timer_takes_completion_from_the_future() -> None:
    now = [1.0]
    timer = HostTimer(clock=lambda: now[0])
    work, timed, done = FakeWork(None), Timed(t_launch=1.0), []
    timer.track(work, timed, done.append)
    assert timed.span_s is None and done == []
    now[0] = 1.25
    work.future.finish()
    assert timed.span_s == pytest.approx(0.25) and done == [timed]


def test_the_nccl_timer_reads_each_works_gpu_time_once_it_completed() -> None:
    timer = NcclTimer()
    fast, late, off = FakeWork(2.5), FakeWork(4.0, completed=False), FakeWork(None)
    got: list[Timed] = []
    timed = [Timed(0.0), Timed(0.0), Timed(0.0)]
    for w, t in zip((fast, late, off), timed, strict=True):
        timer.track(w, t, got.append)
    timer.settle()
    assert got == [timed[0]] and timed[0].span_s == pytest.approx(0.0025)
    assert timer.unavailable == 1  # timing was off for that group: no number, not a zero
    late.completed = True
    timer.settle()
    assert got[-1] is timed[1] and timed[1].span_s == pytest.approx(0.004)
    assert timer.pending == []


# -- the probe on a one-rank gloo group ---------------------------------------------------------


@pytest.fixture
def gloo() -> Iterator[Any]:
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        yield dist
    finally:
        dist.destroy_process_group()


def _probe(tmp_path: Path, **kw: Any) -> CollectiveProbe:
    probe = CollectiveProbe(**kw)
    here = Path(__file__).resolve().parent
    probe.start(RunContext(script="t.py", user_roots=[here], out_dir=tmp_path))
    return probe


def test_explicit_calls_are_timed_per_step_with_their_site(gloo: Any, tmp_path: Path) -> None:
    import torch

    probe = _probe(tmp_path)
    try:
        t = torch.ones(256)
        start = time.perf_counter()
        gloo.all_reduce(t)  # blocking
        work = gloo.all_reduce(t, async_op=True)
        slept = time.perf_counter()
        time.sleep(0.02)  # its own work: not blocked
        slept = time.perf_counter() - slept
        work.wait()
        end = time.perf_counter()
        probe.on_step(0, end)
        gloo.barrier()
        probe.on_step(1, time.perf_counter())
        gloo.all_reduce(t)  # after the last step: counts for no step
    finally:
        probe.stop()
    cap = probe.result()
    assert cap.backend == "gloo" and cap.source == "host"
    ops = {(k[0], k[1]): v for k, v in cap.steps[0].by_key.items()}
    assert sorted(k[0] for k in cap.steps[0].by_key) == ["all_reduce", "all_reduce"]
    assert all(o == "explicit" for _, o in ops)
    sites = {k[2] for k in cap.steps[0].by_key}
    assert all(s is not None and s.startswith("tests/test_distributed.py:") for s in sites)
    assert sum(v.bytes for v in cap.steps[0].by_key.values()) == 2 * 256 * 4
    # the async call's 20 ms of other work is not blocked time: what was blocked fits in the
    # step without the sleep, however long a loaded machine made each call
    assert 0 < cap.steps[0].blocked_s <= (end - start) - slept
    assert [k[0] for k in cap.steps[1].by_key] == ["barrier"]
    record = distributed_record(cap, [0, 1])
    assert record.world_size == 1 and record.backend == "gloo"
    assert {o.op for o in record.collectives} == {"all_reduce", "barrier"}
    assert all(o.calls_per_step == 0.5 for o in record.collectives)  # 2 steps, 1 call each
    assert gloo.all_reduce is gloo.distributed_c10d.all_reduce  # put back


@pytest.mark.parametrize("view", [False, True], ids=["copied", "bucket-view"])
def test_ddp_is_timed_through_its_comm_hook_with_the_same_gradients(
    gloo: Any, tmp_path: Path, view: bool
) -> None:
    """(One rank here: bit-for-bit equality with 3 ranks, where 1/3 rounds, is measured by
    benchmarks/bench_distributed.py.)"""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    def train(probe: CollectiveProbe | None) -> list[torch.Tensor]:
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 2))
        model = DDP(net, gradient_as_bucket_view=view)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(4):
            opt.zero_grad(set_to_none=not view)
            for _ in range(2):  # two micro-batches, each all-reducing
                model(torch.ones(3, 8)).sum().backward()
            opt.step()
            if probe is not None:
                probe.on_step(i, time.perf_counter())
        return [p.detach().clone() for p in model.parameters()]

    probe = _probe(tmp_path)
    try:
        timed = train(probe)
    finally:
        probe.stop()
    assert all(torch.equal(a, b) for a, b in zip(train(None), timed, strict=True))
    (d,) = probe.result().ddp
    assert d.installed and d.site is not None and d.site.startswith("tests/test_distributed.py:")
    model = distributed_record(probe.result(), [1, 2, 3]).ddp[0]
    assert model.syncs_per_step == 2 and model.forwards_per_step == 2
    assert model.grad_bytes == (8 * 16 + 16 + 16 * 2 + 2) * 4
    assert model.bucket_cap_bytes == 25 * 2**20 and model.gradient_as_bucket_view is view
    assert model.exposed_s_per_step is not None and model.exposed_s_per_step > 0
    assert all(t is not None for t in model.bucket_time_s)
    assert step_collective_s(probe.result())[1] == pytest.approx(probe.result().steps[1].blocked_s)


def test_a_scripts_own_comm_hook_is_kept_and_timed(gloo: Any, tmp_path: Path) -> None:
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    calls: list[int] = []

    def my_hook(state: Any, bucket: Any) -> Any:
        calls.append(bucket.index())
        return default_hooks.allreduce_hook(state, bucket)

    probe = _probe(tmp_path)
    try:
        model = DDP(torch.nn.Linear(4, 2))
        model.register_comm_hook(None, my_hook)
        model(torch.ones(2, 4)).sum().backward()
        probe.on_step(0, time.perf_counter())
    finally:
        probe.stop()
    (d,) = probe.result().ddp
    assert calls == [0] and d.user_hook is not None and d.user_hook.endswith("my_hook")
    assert d.steps[0].bucket_spans[0][0] > 0


def test_the_nccl_path_issues_a_blocking_call_async_and_waits(gloo: Any, tmp_path: Path) -> None:
    """With NCCL's timer the probe holds the work it reads the GPU time from: a blocking call is
    issued as async_op=True, waited for, and returns None, as torch.distributed's own does."""
    import torch

    probe = _probe(tmp_path, timer_factory=lambda backend: NcclTimer())
    try:
        t = torch.ones(4)
        assert gloo.all_reduce(t) is None
        work = gloo.all_reduce(t, async_op=True)
        assert work is not None
        work.wait()
        probe.on_step(0, time.perf_counter())
    finally:
        probe.stop()
    assert torch.equal(t, torch.ones(4))  # world size 1: the sum is the tensor
    cap = probe.result()
    assert cap.source == "nccl-work"
    assert sum(v.calls for v in cap.steps[0].by_key.values()) == 2
    # gloo gives no GPU time: the calls are counted, their time is unknown, not zero
    assert all(v.spans == 0 for v in cap.steps[0].by_key.values())
    (op,) = {o.source for o in distributed_record(cap, [0]).collectives}
    assert op == "nccl-work"


def test_the_probe_leaves_torch_distributed_as_it_found_it(tmp_path: Path) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    before = (dist.all_reduce, dist.Work.wait, DDP.__init__, DDP.register_comm_hook)
    probe = _probe(tmp_path)
    assert dist.all_reduce is not before[0]
    probe.stop()
    assert (dist.all_reduce, dist.Work.wait, DDP.__init__, DDP.register_comm_hook) == before


# -- the merge ---------------------------------------------------------------------------------


def _rank(
    rank: int,
    step_s: list[float],
    coll_s: list[float],
    world: int = 2,
    status: str = "ok",
    error: RunError | None = None,
    node: int = 0,
    local_world: int | None = None,
    job: str = "job",
) -> Profile:
    p = empty_profile("train.py")
    p.rank, p.status = rank, status  # type: ignore[assignment]
    p.exit_code = 0 if status == "ok" else 1
    if error is not None:
        p.error = error
    p.steps.series = [
        StepRecord(index=i, start_s=None, time_s=t, warmup=i < 1, collective_s=c)
        for i, (t, c) in enumerate(zip(step_s, coll_s, strict=True))
    ]
    p.steps.count = len(step_s)
    measured = step_s[1:]
    p.steps.time_s.median = statistics.median(measured) if measured else None
    p.steps.time_s.mean = statistics.fmean(measured) if measured else None
    share = sum(coll_s[1:]) / sum(measured) if measured else 0.0
    p.breakdown = Breakdown(compute=1 - share - 0.1, other=0.1, collective=share)
    p.distributed = DistributedRun(
        backend="gloo",
        world_size=world,
        rank=rank,
        node_rank=node,
        local_world_size=local_world or world,
        job_id=job,
    )
    return p


def test_the_rank_blocked_least_communicates_the_others_wait() -> None:
    r0 = _rank(0, [0.1, 0.025, 0.025, 0.025], [0.05, 0.022, 0.021, 0.023])
    r1 = _rank(1, [0.1, 0.025, 0.025, 0.025], [0.05, 0.002, 0.001, 0.003])
    doc = merge_ranks([("rank-0", r0), ("rank-1", r1)], 0, "train.py", [])
    e0, e1 = doc.ranks or []
    assert e0.collective_s_per_step == pytest.approx(0.022)
    assert e0.collective_wait_s_per_step == pytest.approx(0.020)
    assert e0.collective_comm_s_per_step == pytest.approx(0.002)
    assert e1.collective_wait_s_per_step == pytest.approx(0.0)
    assert e0.own_work_s_per_step == pytest.approx(0.005)
    assert e1.own_work_s_per_step == pytest.approx(0.025)
    assert doc.status == "ok" and doc.rank is None
    (f,) = [f for f in evaluate(doc) if f.id == "straggler-rank"]
    ev = msgspec.convert(f.evidence, StragglerEvidence)  # the shape traces will write too
    assert ev.rank == 1 and ev.extra_s_per_step == pytest.approx(0.020)
    assert ev.others_wait_s_per_step == pytest.approx(0.020)
    assert ev.wait_s_per_step == {"0": pytest.approx(0.02), "1": 0.0}
    assert ev.top_part in ("compute", "other") and ev.source == "run"
    assert "rank 1" in f.title.lower() and f.estimate_model


def test_a_job_from_traces_gets_one_straggler_finding() -> None:
    """A document from traces has both `trace` and `ranks`: the trace rule alone speaks."""
    from gpuopt.model.trace import TraceDetails

    r0 = _rank(0, [0.1, 0.025, 0.025, 0.025], [0.05, 0.022, 0.021, 0.023])
    r1 = _rank(1, [0.1, 0.025, 0.025, 0.025], [0.05, 0.002, 0.001, 0.003])
    doc = merge_ranks([("rank-0", r0), ("rank-1", r1)], 0, "train.py", [])
    assert [f.id for f in evaluate(doc)].count("straggler-rank") == 1
    doc.trace = TraceDetails()
    assert [f.id for f in evaluate(doc)].count("straggler-rank") == 0  # no straggler record


def test_no_straggler_when_the_ranks_are_even() -> None:
    r0 = _rank(0, [0.1, 0.025, 0.025], [0.0, 0.003, 0.002])
    r1 = _rank(1, [0.1, 0.025, 0.025], [0.0, 0.002, 0.003])
    doc = merge_ranks([("rank-0", r0), ("rank-1", r1)], 0, "train.py", [])
    assert [f for f in evaluate(doc) if f.id == "straggler-rank"] == []


def test_a_failed_rank_is_named_the_others_consequences_are_not() -> None:
    gone = RunError(type="RuntimeError", message="[gloo] Connection closed by peer [1.2.3.4]")
    r0 = _rank(0, [0.1, 0.02], [0.0, 0.0], status="error", error=gone)
    crash = RunError(type="ValueError", message="bad batch\nsecond line")
    r1 = _rank(1, [0.1, 0.02], [0.0, 0.0], status="error", error=crash)
    doc = merge_ranks([("rank-0", r0), ("rank-1", r1)], 1, "train.py", [])
    assert doc.status == "error" and doc.exit_code == 1
    assert doc.error == RunError(type="ValueError", message="rank 1 failed: bad batch")
    assert "rank 1 failed: ValueError: bad batch (exit code 1)" in doc.warnings
    assert any(w.startswith("rank 0 ended: RuntimeError: [gloo]") for w in doc.warnings)


def test_a_rank_that_wrote_nothing_is_an_error_row() -> None:
    r0 = _rank(0, [0.1, 0.02], [0.0, 0.0], world=3)
    r2 = _rank(2, [0.1, 0.02], [0.0, 0.0], world=3)
    doc = merge_ranks([("rank-0", r0), ("rank-2", r2)], 1, "train.py", [])
    assert [e.rank for e in doc.ranks or []] == [0, 1, 2]
    missing = (doc.ranks or [])[1]
    assert missing.status == "error" and missing.error is not None
    assert missing.error.type == "NoProfile"
    assert doc.status == "error" and doc.error is not None and "rank 1" in doc.error.message


def test_ranks_of_another_node_are_a_warning_not_a_failure() -> None:
    r2 = _rank(2, [0.1, 0.02], [0.0, 0.0], world=4, node=1, local_world=2)
    r3 = _rank(3, [0.1, 0.02], [0.0, 0.0], world=4, node=1, local_world=2)
    doc = merge_ranks([("rank-2", r2), ("rank-3", r3)], 0, "train.py", [])
    assert [e.rank for e in doc.ranks or []] == [2, 3] and doc.status == "ok"
    assert any("ranks 0, 1 of the job's 4 ran on other nodes" in w for w in doc.warnings)


@pytest.mark.parametrize(
    ("statuses", "code", "expected"),
    [
        (["ok", "ok"], 0, "ok"),
        (["ok", "error"], 1, "error"),
        (["interrupted", "error"], 1, "error"),  # the launcher stopped rank 0: rank 1's error
        (["interrupted", "interrupted"], 143, "interrupted"),
        (["ok", "ok"], 130, "interrupted"),
        (["ok", "ok"], 1, "error"),
    ],
)
def test_the_jobs_status(statuses: list[Any], code: int, expected: str) -> None:
    assert merged_status(statuses, code) == expected


def test_the_merged_document_round_trips_and_validates() -> None:
    r0 = _rank(0, [0.1, 0.025, 0.025], [0.05, 0.022, 0.021])
    r1 = _rank(1, [0.1, 0.025, 0.025], [0.05, 0.002, 0.001])
    doc = add_findings(merge_ranks([("rank-0", r0), ("rank-1", r1)], 0, "train.py", []))
    again = decode(encode(doc), "x")
    assert again == doc
    frames = doc.frames()
    assert list(frames["ranks"]["collective_wait_s_per_step"].round(4)) == [0.02, 0.0]
    assert "collective" in set(frames["breakdown"]["part"])
    assert measured_steps(r0) == r0.steps.series[1:]


# -- the Ring-AllReduce model --------------------------------------------------------------------


def test_bus_bandwidth_is_2_n_minus_1_over_n_of_bytes_over_time() -> None:
    r = ring_allreduce(4, [2**20, 3 * 2**20], [0.001, 0.003])
    assert r is not None
    assert r.algo_gbps == pytest.approx(4 * 2**20 / 0.004 / 1e9)
    assert r.bus_gbps == pytest.approx(1.5 * r.algo_gbps)
    assert r.nominal_gbps is None and r.efficiency is None
    assert "2(N-1)/N" in r.model
    assert ring_allreduce(1, [100], [0.1]) is None


def test_the_fit_recovers_latency_and_bandwidth() -> None:
    sizes = [2**16, 2**18, 2**20, 2**22]
    times = [50e-6 + b / 10e9 for b in sizes]
    latency, bandwidth = fit_latency(sizes, times)
    assert latency == pytest.approx(50e-6) and bandwidth == pytest.approx(10.0)
    assert fit_latency([100, 100], [0.1, 0.2]) == (None, None)


def test_nominal_bandwidth_only_where_known() -> None:
    h100 = [GpuInfo(name="NVIDIA H100 80GB HBM3")]
    assert nominal_link("nccl", h100, nodes=1)[0] == 450.0
    assert nominal_link("nccl", [GpuInfo(name="NVIDIA A100-PCIE-40GB")], nodes=1)[0] == 32.0
    assert nominal_link("nccl", h100, nodes=2) == (None, None)  # the network: not known
    assert nominal_link("gloo", [], nodes=1) == (None, None)


def test_ddp_rules_fire_on_their_evidence() -> None:
    doc = _rank(0, [0.1, 0.05, 0.05], [0.0, 0.02, 0.02])
    ddp = DdpModel(
        site="train.py:9",
        buckets=12,
        bucket_bytes=[2**16] * 6 + [2**18] * 6,
        bucket_time_s=[0.001] * 6 + [0.0012] * 6,
        grad_bytes=6 * 2**16 + 6 * 2**18,
        bucket_cap_bytes=2**18,
        syncs_per_step=4.0,
        forwards_per_step=4.0,
        exposed_s_per_step=0.02,
    )
    assert isinstance(doc.distributed, DistributedRun)
    doc.distributed.ddp = [ddp]
    ring = ring_allreduce(2, ddp.bucket_bytes, [t or 0.0 for t in ddp.bucket_time_s], (400.0, "x"))
    assert ring is not None
    doc.distributed.ring = ring
    ids = {f.id: f for f in evaluate(doc)}
    acc = ids["gradient-accumulation-sync"]
    assert acc.site == "train.py:9" and "no_sync" in acc.fix
    assert acc.evidence["syncs_per_step"] == 4.0
    small = ids["small-buckets"]
    assert small.fix_params == {"bucket_cap_mb": "25"}
    assert ids["low-bus-bandwidth"].evidence["nominal_gbps"] == 400.0


# -- torchrun and run directories --------------------------------------------------------------


def _opts(**tr: Any) -> ProfileOptions:
    return ProfileOptions(script="t.py", module=None, args=[], torchrun=TorchrunOptions(**tr))


def test_torchrun_options_pass_through() -> None:
    target = Target("t.py", None, ["--lr", "1"])
    alone = torchrun_command(ProfileOptions("t.py", None, [], nproc_per_node=2), target, Path("d"))
    assert alone[3:5] == ["--standalone", "--nproc-per-node=2"]
    assert "--fixes" not in alone and "--seed" not in alone and "--record-losses" not in alone
    given = ProfileOptions(
        "t.py", None, [], nproc_per_node=2, fixes=Path("fx"), seed=0, record_losses=True
    )
    ranked = torchrun_command(given, target, Path("d"))
    rank_args = ranked[ranked.index("gpuopt.runner.rank_entry") : ranked.index("--")]
    assert rank_args[rank_args.index("--fixes") + 1] == str(Path("fx").resolve())
    assert rank_args[rank_args.index("--seed") + 1] == "0" and "--record-losses" in rank_args
    opts = _opts(
        nnodes="2",
        node_rank=1,
        rdzv_backend="c10d",
        rdzv_endpoint="h:29400",
        rdzv_id="j",
        max_restarts=3,
        extra=["--log-dir=logs"],
    )
    cmd = torchrun_command(opts, target, Path("d"))
    assert "--standalone" not in cmd and cmd[-3:] == ["--", "--lr", "1"]
    for arg in (
        "--nnodes=2",
        "--node-rank=1",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=h:29400",
        "--rdzv-id=j",
        "--max-restarts=3",
        "--log-dir=logs",
    ):
        assert arg in cmd[: cmd.index("gpuopt.runner.rank_entry")]
    assert opts.launches and opts.torchrun.multi_node and opts.torchrun.job_key == "rdzv-id j"
    static = _opts(master_addr="10.0.0.1", master_port=1234, nnodes="1")
    assert not static.torchrun.multi_node and not static.torchrun.standalone
    assert static.torchrun.job_key == "master 10.0.0.1:1234"


@pytest.mark.parametrize(
    ("tr", "needle"),
    [
        ({"nnodes": "two"}, "--nnodes 'two'"),
        ({"nnodes": "4:2"}, "MIN <= MAX"),
        ({"nnodes": "2", "node_rank": 2}, "--node-rank 2"),
        ({"rdzv_endpoint": " "}, "--rdzv-endpoint: empty"),
        ({"extra": ["log-dir"]}, "expected one torchrun option"),
        ({"extra": ["--nproc-per-node=4"]}, "gpuopt sets --nproc-per-node itself"),
    ],
)
def test_bad_torchrun_options_are_one_line(tr: dict[str, Any], needle: str) -> None:
    with pytest.raises(GpuoptError) as err:
        check_torchrun(_opts(**tr))
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_the_nodes_of_a_job_share_a_run_directory(tmp_path: Path) -> None:
    out = tmp_path / "job"
    first = RunDirectory.prepare_job(out, "rdzv-id a")
    (out / "rank-0").mkdir()
    (out / "rank-0" / "profile.json").write_bytes(encode(empty_profile("t.py")))
    second = RunDirectory.prepare_job(out, "rdzv-id a")  # another node, same job: joins
    assert second.path == first.path and (out / "rank-0").exists()
    with pytest.raises(GpuoptError, match="earlier run"):
        RunDirectory.prepare_job(out, "rdzv-id b")  # another job
    (out / "profile.json").write_bytes(encode(empty_profile("t.py")))
    with pytest.raises(GpuoptError, match="earlier run"):
        RunDirectory.prepare_job(out, "rdzv-id a")  # the same id, finished: an earlier run


def _write_rank(root: Path, p: Profile) -> None:
    d = root / f"rank-{p.rank}"
    d.mkdir(parents=True)
    (d / "profile.json").write_bytes(encode(p))


def test_run_directories_of_one_job_merge_and_others_do_not(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    _write_rank(a, _rank(0, [0.1, 0.02], [0.0, 0.0]))
    _write_rank(b, _rank(1, [0.1, 0.02], [0.0, 0.0]))
    _write_rank(c, _rank(1, [0.1, 0.02], [0.0, 0.0], job="other"))
    ranks = job_ranks([a, b])
    assert ranks is not None and [n for n, _ in ranks] == [f"{a}/rank-0", f"{b}/rank-1"]
    assert job_ranks([a, c]) is None
    with pytest.raises(GpuoptError, match="rank 0 is in two directories"):
        job_ranks([a, a])


def test_report_merges_the_directories_of_one_jobs_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from gpuopt.commands.report import report_command

    a, b = tmp_path / "node0", tmp_path / "node1"
    _write_rank(a, _rank(0, [0.1, 0.025, 0.025], [0.05, 0.022, 0.021], world=2, node=0,
                         local_world=1))  # fmt: skip
    _write_rank(b, _rank(1, [0.1, 0.025, 0.025], [0.05, 0.002, 0.001], world=2, node=1,
                         local_world=1))  # fmt: skip
    for node, root in ((0, a), (1, b)):  # what each node's launcher wrote: its own ranks
        alone = merge_ranks(
            [(f"rank-{node}", _rank(node, [0.1], [0.0], node=node, local_world=1))], 0, "t", []
        )
        (root / "profile.json").write_bytes(encode(alone))
        assert any("ran on other nodes" in w for w in alone.warnings)
    report_command([b, a], "json", None)
    doc = json.loads(capsys.readouterr().out)
    assert [e["rank"] for e in doc["ranks"]] == [0, 1] and doc["warnings"] == []
    assert [e["dir"] for e in doc["ranks"]] == [f"{a}/rank-0", f"{b}/rank-1"]
    (f,) = [f for f in doc["findings"] if f["id"] == "straggler-rank"]
    assert f["evidence"]["rank"] == 1
    with pytest.raises(GpuoptError, match="several paths are merged only"):
        report_command([a, tmp_path / "node0" / "rank-0"], "json", None)
