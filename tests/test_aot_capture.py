"""Capture and the ScheduledModule on CPU: same outputs as eager, plan as plain data, fallbacks."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest
import torch
from aot_support import ZOO_NAMES, scheduled_zoo
from torch import nn

from gpuopt.aot import schedule
from gpuopt.aot.capture import CaptureError
from gpuopt.aot.plan import Plan, PlanError

CONTRACT_KEYS = {"nodes", "edges", "streams", "syncs", "num_streams", "order"}


@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO_NAMES)
def test_scheduled_module_matches_eager(name: str) -> None:
    model, inputs, scheduled = scheduled_zoo(name)
    with torch.no_grad():
        expected = model(*inputs)
    got = scheduled(*inputs)
    assert torch.allclose(got, expected, rtol=1e-5, atol=1e-6)
    # A second call with new values of the same shape gives the new eager result.
    other = tuple(torch.randn_like(x) for x in inputs)
    with torch.no_grad():
        assert torch.allclose(scheduled(*other), model(*other), rtol=1e-5, atol=1e-6)
    assert scheduled.plan.stats["capture_max_abs_diff"] == 0.0


@pytest.mark.slow  # seconds of CPU: out of make test-fast
@pytest.mark.parametrize("name", ZOO_NAMES)
def test_plan_is_plain_json_data_with_the_contract_keys(name: str) -> None:
    _, _, scheduled = scheduled_zoo(name)
    doc = scheduled.plan.to_dict()
    assert CONTRACT_KEYS <= set(doc)
    text = json.dumps(doc)
    again = Plan.from_dict(json.loads(text))
    assert again.to_dict() == doc
    assert doc["num_streams"] == len(set(doc["streams"].values()))
    assert set(doc["streams"]) == set(doc["nodes"]) == set(doc["order"])
    assert len(doc["syncs"]) == doc["stats"]["reduced_edges"] - doc["stats"]["matching"]
    # order is topological for the edges
    pos = {n: i for i, n in enumerate(doc["order"])}
    assert all(pos[s] < pos[d] for s, d in doc["edges"])


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_zoo_graphs_have_concurrency_to_exploit() -> None:
    """The branchy models must get several streams; the plan is not trivially one stream."""
    for name, at_least in (("inception_v3", 3), ("nasnet_a_mobile", 4), ("transformer_block", 2)):
        plan = scheduled_zoo(name)[2].plan
        assert plan.num_streams >= at_least, (name, plan.num_streams)
        assert plan.syncs


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_plan_from_dict_rejects_inconsistent_documents() -> None:
    doc = scheduled_zoo("transformer_block")[2].plan.to_dict()
    bad = dict(doc, order=doc["order"][::-1])
    with pytest.raises(PlanError):
        Plan.from_dict(bad)
    bad = dict(doc, streams={k: 99 for k in doc["streams"]})
    with pytest.raises(PlanError):
        Plan.from_dict(bad)
    with pytest.raises(PlanError):
        Plan.from_dict({"nodes": []})
    with pytest.raises(PlanError):
        Plan.from_dict([1, 2])  # type: ignore[arg-type]


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_static_shapes_are_enforced() -> None:
    _, inputs, scheduled = scheduled_zoo("transformer_block")
    x = inputs[0]
    with pytest.raises(ValueError, match="static"):
        scheduled(torch.randn(x.shape[0], x.shape[1] + 1, x.shape[2]))


class InPlace(nn.Module):
    """In-place ReLU and add_ on two branches: export functionalizes them, fx must serialize
    them."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(3, 4, 1)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.a(x))
        z = self.b(x)
        z.add_(1.0)
        return torch.cat([y, z], 1)


def _sched(model: nn.Module, inputs: tuple, **kw):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kw.setdefault("streams", "multi")  # the planner's own plan
        return schedule(model, inputs, **kw)


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_export_functionalizes_in_place_ops() -> None:
    torch.manual_seed(0)
    model, x = InPlace().eval(), torch.randn(1, 3, 6, 6)
    sm = _sched(model, (x,))
    assert sm.plan.capture == "export"
    assert not any(op["mutates"] for op in sm.plan.ops.values())
    assert sm.plan.num_streams == 2
    with torch.no_grad():
        assert torch.equal(sm(x), model(x))
    for seed in range(10):
        r = sm.simulate(x, seed=seed)
        assert r.ok and torch.equal(r.outputs, model(x).detach())


def test_fx_capture_serializes_in_place_ops_and_stays_correct() -> None:
    torch.manual_seed(0)
    model, x = InPlace().eval(), torch.randn(1, 3, 6, 6)
    sm = _sched(model, (x,), capture="fx")
    assert sm.plan.capture == "fx"
    mutating = [n for n, op in sm.plan.ops.items() if op["mutates"]]
    assert len(mutating) == 2  # the in-place ReLU and the add_
    assert any("serialized" in note for note in sm.plan.notes)
    # Each in-place op is ordered only against its own storage's users: the branches stay parallel.
    assert sm.plan.num_streams == 2
    with torch.no_grad():
        assert torch.equal(sm(x), model(x))
    for seed in range(10):
        r = sm.simulate(x, seed=seed)
        assert r.ok and torch.equal(r.outputs, model(x).detach())


def test_fx_plan_without_barriers_is_flagged() -> None:
    """Remove the serialization the mutation detector added: the simulator must object."""
    torch.manual_seed(0)
    model, x = InPlace().eval(), torch.randn(1, 3, 6, 6)
    sm = _sched(model, (x,), capture="fx")
    from gpuopt.aot.plan import build_plan

    names = sm.plan.order
    data_edges = [
        (s, d)
        for s, d in sm.plan.edges
        if s in {n.name for n in sm.program.by_name[d].all_input_nodes}
    ]
    naive = build_plan(names, data_edges)
    naive.ops, naive.memory, naive.release = sm.plan.ops, sm.plan.memory, {}
    flagged = [not sm.simulate(x, seed=s, plan=naive).ok for s in range(10)]
    assert all(flagged)


def test_export_failure_falls_back_to_fx(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*a, **k):  # type: ignore[no-untyped-def]
        raise RuntimeError("export refused for the test")

    monkeypatch.setattr(torch.export, "export", refuse)
    torch.manual_seed(0)
    model, x = InPlace().eval(), torch.randn(1, 3, 6, 6)
    sm = _sched(model, (x,))
    assert sm.plan.capture == "fx"
    assert any("export refused for the test" in n for n in sm.plan.notes)
    with torch.no_grad():
        assert torch.equal(sm(x), model(x))


class DataDependent(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return x - 1


def test_uncapturable_model_raises_capture_error() -> None:
    with pytest.raises(CaptureError, match="static graph"):
        _sched(DataDependent(), (torch.randn(3),), capture="fx")


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_training_mode_batchnorm_updates_are_serialized_and_match() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).train()
    ref = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).train()
    ref.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 8, 8)
    sm = _sched(model, (x,))
    assert any(op["mutates"] for op in sm.plan.ops.values())  # copy_ into the running stats
    # Scheduling itself left the running statistics alone...
    assert torch.equal(model[1].running_mean, ref[1].running_mean)
    out = sm(x)
    with torch.no_grad():
        expected = ref(x)
    assert torch.allclose(out, expected, atol=1e-6)
    # ...and a scheduled call updates them exactly as an eager call does.
    assert torch.allclose(model[1].running_mean, ref[1].running_mean, atol=1e-6)
    assert torch.allclose(model[1].running_var, ref[1].running_var, atol=1e-6)
    assert int(model[1].num_batches_tracked) == int(ref[1].num_batches_tracked) == 1


def test_importing_gpuopt_aot_does_not_import_torch() -> None:
    code = (
        "import sys, gpuopt, gpuopt.aot, gpuopt.aot.plan, gpuopt.aot.streams, gpuopt.aot.simulate; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.slow  # seconds of CPU: out of make test-fast
@pytest.mark.parametrize("name", ZOO_NAMES)
def test_zoo_kernels_sharing_a_stream_are_ordered(name: str) -> None:
    """Maximum logical concurrency on the real graphs: two kernels on one stream have a path
    between them; and every side stream forks from and joins the origin."""
    from gpuopt.aot.graph import descendants

    plan = scheduled_zoo(name)[2].plan
    dag = plan.dag()
    reach = descendants(dag)
    kernels = [i for i, n in enumerate(dag.names) if plan.ops[n]["kind"] == "kernel"]
    by_stream: dict[int, list[int]] = {}
    for i in kernels:
        by_stream.setdefault(plan.streams[dag.names[i]], []).append(i)
    for members in by_stream.values():
        for a, b in zip(members, members[1:], strict=False):
            assert (reach[a] >> b) & 1, (dag.names[a], dag.names[b])
    assert plan.fork == plan.join == list(range(1, plan.num_streams))
