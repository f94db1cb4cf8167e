"""The vector-clock stream simulator: correct plans pass in every random interleaving, broken
plans are flagged (so these tests can fail), and captured models give eager outputs."""

from __future__ import annotations

import copy
import random

import pytest
import torch
from aot_support import (
    INPUT_SENSITIVE,
    ZOO_NAMES,
    assert_outputs_survive_the_next_call,
    scheduled_zoo,
)

from gpuopt.aot.executor_cpu import MemoryModel, StreamSimulator, run_sequential
from gpuopt.aot.executor_cuda import CudaPlanRunner
from gpuopt.aot.graph import Dag
from gpuopt.aot.launch import launch_script
from gpuopt.aot.plan import JOIN, Plan, build_plan, release_policy


def random_plan(seed: int, n: int = 25, p: float = 0.15) -> tuple[Plan, MemoryModel]:
    rng = random.Random(seed)
    names = [f"v{i}" for i in range(n)]
    edges = [(names[i], names[j]) for i in range(n) for j in range(i + 1, n) if rng.random() < p]
    plan = build_plan(names, edges)
    dag = Dag.from_edges(names, edges)
    sources = [names[i] for i in range(n) if not dag.pred[i]]
    sinks = [names[i] for i in range(n) if not dag.succ[i]]
    memory = MemoryModel.from_dag(names, edges, input_readers=sources, output_nodes=sinks)
    reads = {v: [u for u, w in edges if w == v] for v in names}
    plan.release = release_policy(
        plan, {v: [i] for i, v in enumerate(names)}, reads, keep=set(sinks)
    )
    return plan, memory


@pytest.mark.parametrize("seed", range(12))
def test_correct_plans_pass_in_every_random_interleaving(seed: int) -> None:
    plan, memory = random_plan(seed)
    sim = StreamSimulator(plan, memory)
    orders = set()
    for run in range(40):
        report = sim.run(seed=run)
        assert report.ok, report.violations[:3]
        assert len(report.played) == len(plan.nodes)
        orders.add(tuple(name for _, name in report.played))
    if plan.num_streams > 1:
        assert len(orders) > 1, "the simulator should explore different legal orders"


def _plan_with_syncs(seed_start: int = 0) -> tuple[Plan, MemoryModel]:
    for seed in range(seed_start, seed_start + 100):
        plan, memory = random_plan(seed)
        if plan.syncs and plan.num_streams > 2:
            return plan, memory
    raise AssertionError("no random plan with syncs")


# A read not ordered after its write shows up as "unordered-read" when the random play ran the
# writer first, and as "read-before-write" when it ran the reader first.
ORDERING = {"unordered-read", "read-before-write"}


def _all_seeds_flag(plan: Plan, memory: MemoryModel, kinds: set[str], runs: int = 25) -> None:
    sim = StreamSimulator(plan, memory)
    for run in range(runs):
        report = sim.run(seed=run)
        found = {v.kind for v in report.violations}
        assert kinds & found, f"seed {run}: expected one of {kinds}, got {found or 'no violation'}"


def test_missing_sync_is_flagged_on_every_run() -> None:
    plan, memory = _plan_with_syncs()
    broken = copy.deepcopy(plan)
    broken.syncs = broken.syncs[1:]
    _all_seeds_flag(broken, memory, ORDERING)


def test_every_single_sync_is_necessary() -> None:
    """Minimality seen from the executor: dropping any one sync breaks the ordering."""
    plan, memory = _plan_with_syncs(10)
    for k in range(len(plan.syncs)):
        broken = copy.deepcopy(plan)
        del broken.syncs[k]
        assert not StreamSimulator(broken, memory).run(seed=k).ok


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_missing_fork_is_flagged() -> None:
    plan, memory = _plan_with_syncs()
    broken = copy.deepcopy(plan)
    # A side stream whose first node reads the inputs, with no fork: it reads them unordered.
    readers = {n for n, r in memory.reads.items() if memory.inputs & r}
    side = {plan.streams[n] for n in readers if plan.streams[n] != 0}
    assert side
    broken.fork = [s for s in plan.fork if s not in side]
    _all_seeds_flag(broken, memory, ORDERING)


def test_missing_join_is_flagged() -> None:
    plan, memory = _plan_with_syncs()
    writers = {n for n, w in memory.writes.items() if memory.outputs & w}
    side = {plan.streams[n] for n in writers if plan.streams[n] != 0}
    assert side
    broken = copy.deepcopy(plan)
    broken.join = [s for s in plan.join if s not in side]
    _all_seeds_flag(broken, memory, ORDERING)


def test_wait_issued_before_its_record_is_flagged() -> None:
    """CUDA binds a wait to the latest record issued so far: a launch order that puts the
    consumer before its producer's record makes the wait a no-op."""
    names = ["a", "b", "c"]
    edges = [("a", "c"), ("b", "c")]
    plan = build_plan(names, edges)
    memory = MemoryModel.from_dag(names, edges, input_readers=["a", "b"], output_nodes=["c"])
    # The plan syncs one of a/b into c's stream; move that source after c in the launch order.
    src, dst = plan.syncs[0]
    broken = copy.deepcopy(plan)
    broken.order = [n for n in plan.order if n != src] + [src]
    _all_seeds_flag(broken, memory, ORDERING)


def test_early_release_of_a_cross_stream_value_is_flagged() -> None:
    """Freeing a value read by another stream right after its last reader is a reuse hazard."""
    names = ["a", "b", "c", "d"]
    edges = [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]
    plan = build_plan(names, edges)
    memory = MemoryModel.from_dag(names, edges, input_readers=["a"], output_nodes=["d"])
    reads = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}
    plan.release = release_policy(plan, {n: [i] for i, n in enumerate(names)}, reads, keep={"d"})
    # "a" is read on both streams, so the policy holds it to the join; the sync sources too.
    assert plan.release["a"] == JOIN
    for run in range(20):
        assert StreamSimulator(plan, memory).run(seed=run).ok
    broken = copy.deepcopy(plan)
    last = [n for n in plan.order if n in ("b", "c")][-1]
    broken.release["a"] = last
    _all_seeds_flag(broken, memory, {"unordered-free", "use-after-free"})


def test_same_stream_values_are_released_early_and_safely() -> None:
    plan, memory = random_plan(3, n=40, p=0.08)
    early = [v for v, when in plan.release.items() if when != JOIN]
    assert early, "a chain-heavy plan should free some values before the join"
    report = StreamSimulator(plan, memory).run(seed=0)
    assert report.ok and report.frees > 0


def test_launch_script_has_one_wait_per_sync_and_records_only_on_sync_sources() -> None:
    plan, _ = _plan_with_syncs()
    script = launch_script(plan)
    waits = [a for a in script if a.kind == "wait"]
    records = [a for a in script if a.kind == "record"]
    assert len(waits) == len(plan.syncs)
    assert {a.ref for a in records} == {s for s, _ in plan.syncs}
    side = set(range(1, plan.num_streams))
    assert {a.stream for a in script if a.kind == "fork_wait"} == side
    assert {a.side for a in script if a.kind == "join_wait"} == side
    assert all(a.stream == 0 for a in script if a.kind in ("fork_record", "join_wait"))
    # Fork first, join last (before the held releases).
    kinds = [a.kind for a in script if a.kind != "release"]
    assert kinds[0] == "fork_record" and kinds[-1] == "join_wait"


# ---------------------------------------------------------------- captured models
@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO_NAMES)
def test_zoo_plans_match_eager_in_random_interleavings(name: str) -> None:
    model, inputs, scheduled = scheduled_zoo(name)
    with torch.no_grad():
        expected = model(*inputs)
    orders = set()
    for seed in range(12):
        report = scheduled.simulate(*inputs, seed=seed)
        assert report.ok, [str(v) for v in report.violations[:3]]
        assert torch.allclose(report.outputs, expected, rtol=1e-5, atol=1e-6)
        orders.add(tuple(n for _, n in report.played))
    if scheduled.plan.num_streams > 1:
        assert len(orders) > 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["inception_v3", "nasnet_a_mobile"])
def test_broken_zoo_plan_is_flagged(name: str) -> None:
    model, inputs, scheduled = scheduled_zoo(name)
    plan = copy.deepcopy(scheduled.plan)
    assert plan.syncs
    removed = plan.syncs.pop(len(plan.syncs) // 2)
    for seed in range(5):
        report = scheduled.simulate(*inputs, seed=seed, plan=plan)
        assert not report.ok, f"dropping sync {removed} went unnoticed"
        assert report.outputs is None


@pytest.mark.slow
@pytest.mark.parametrize("name", ["inception_v3", "nasnet_a_mobile"])
def test_zoo_release_policy_frees_memory_without_hazards(name: str) -> None:
    _, inputs, scheduled = scheduled_zoo(name)
    held = sum(1 for when in scheduled.plan.release.values() if when == JOIN)
    early = sum(1 for when in scheduled.plan.release.values() if when != JOIN)
    assert held > 0 and early > 0
    report = scheduled.simulate(*inputs, seed=1)
    assert report.ok and report.frees > 0


class _ReplayInPlace:
    """A CUDA graph's replay, on the CPU: the plan runs on the runner's static inputs and its
    results are written into the same static output buffers, as every real replay does."""

    def __init__(self, runner: CudaPlanRunner) -> None:
        self.runner = runner

    def replay(self) -> None:
        r = self.runner
        r.static_outputs.copy_(run_sequential(r.program, r.plan, r.static_inputs))


def _replaying_runner(cls: type, scheduled, inputs):  # type: ignore[no-untyped-def]
    """``cls``'s ``__call__`` (the real CudaPlanRunner's: copy in, replay, hand back) over a
    graph replayed in place on the CPU."""
    runner = cls.__new__(cls)
    runner.program, runner.plan, runner.use_graph = scheduled.program, scheduled.plan, True
    leaves = scheduled.program.flatten_inputs(inputs)
    runner.static_inputs = [x.clone() for x in leaves]
    runner.static_outputs = run_sequential(runner.program, runner.plan, runner.static_inputs)
    runner.graph = _ReplayInPlace(runner)
    return lambda x: runner(scheduled.program.flatten_inputs((x,)))


class _NoCopyRunner(CudaPlanRunner):
    """The bug the GPU test is there to catch: the static output buffer handed back as is."""

    def __call__(self, leaves):  # type: ignore[no-untyped-def]
        for static, x in zip(self.static_inputs, leaves, strict=True):
            static.copy_(x)
        self.graph.replay()
        return self.static_outputs


@pytest.mark.slow  # seconds of CPU: out of make test-fast
@pytest.mark.parametrize("name", INPUT_SENSITIVE)
def test_outputs_survive_the_next_replay_check_on_cpu(name: str) -> None:
    """tests/test_aot_cuda.py's check, run here on the runner's own replay logic: it passes on
    CudaPlanRunner and fails on a runner that hands back the buffer the next replay overwrites."""
    model, inputs, scheduled = scheduled_zoo(name)
    x2 = torch.randn_like(inputs[0])
    with torch.no_grad():
        good = _replaying_runner(CudaPlanRunner, scheduled, inputs)
        assert_outputs_survive_the_next_call(good, model, inputs[0], x2)
        bad = _replaying_runner(_NoCopyRunner, scheduled, inputs)
        with pytest.raises(AssertionError):
            assert_outputs_survive_the_next_call(bad, model, inputs[0], x2)


@pytest.mark.slow
def test_outputs_survive_check_refuses_an_input_insensitive_model() -> None:
    """On the small inception_v3 two random inputs give outputs ~1e-8 apart: the check says
    it cannot tell them apart instead of passing or failing on them."""
    model, inputs, _ = scheduled_zoo("inception_v3")
    with pytest.raises(AssertionError, match="too alike"):
        assert_outputs_survive_the_next_call(model, model, inputs[0], torch.randn_like(inputs[0]))
