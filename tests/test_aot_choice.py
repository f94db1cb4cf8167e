"""schedule never hands back a plan slower than the one-stream graph of the same model: the
choice (measured on a device, else by the cost model with a margin) with fake numbers, the plan
it hands back, what the command says, and the CUDA launch's host work counted with fake
streams and events."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from aot_support import scheduled_zoo

from gpuopt.aot import choice, schedule, zoo
from gpuopt.commands.schedule import schedule_command


def _sched(name: str, **kw: Any) -> Any:
    model, inputs = zoo.ZOO[name]("small")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model, inputs, schedule(model, inputs, **kw)


# -- the decision, on numbers ----------------------------------------------------------------
def test_the_margin_covers_every_overestimate_measured_on_the_h200() -> None:
    worst = max(est / measured for _, est, measured in choice.H200_CHECK)
    assert 1.35 < worst < choice.MIN_ESTIMATED_GAIN
    # and it classifies the four H200 measurements right: multi-stream only where it was faster
    for name, est, measured in choice.H200_CHECK:
        got = choice.by_estimate(1.0, est, planned=4)
        assert (got.chosen == choice.MULTI) == (measured > 1.1), name


@pytest.mark.parametrize(
    ("multi_ms", "one_ms", "chosen"),
    [
        ((1.0, 1.1, 0.9), (2.0, 2.1, 1.9), choice.MULTI),  # clearly faster
        ((0.385,) * 5, (0.313,) * 5, choice.ONE),  # resnet_stage on the H200: slower
        ((0.99, 1.0, 0.995), (1.0, 1.0, 1.0), choice.ONE),  # within 2%: not worth streams
        ((0.9, 3.0, 0.9), (1.0, 1.0, 1.0), choice.MULTI),  # one disturbed round does not decide
    ],
)
def test_by_measurement(
    multi_ms: tuple[float, ...], one_ms: tuple[float, ...], chosen: str
) -> None:
    got = choice.by_measurement([m / 1e3 for m in multi_ms], [o / 1e3 for o in one_ms], 3)
    assert got.chosen == chosen and got.by == "measured"
    assert "alternated rounds" in got.reason
    assert got.to_dict()["multi_stream_s"] == pytest.approx(sorted(multi_ms)[1] / 1e3)


def test_by_measurement_needs_paired_rounds() -> None:
    with pytest.raises(ValueError):
        choice.by_measurement([1.0], [1.0, 2.0], 2)
    with pytest.raises(ValueError):
        choice.by_measurement([], [], 2)


def test_by_estimate_says_it_is_an_estimate() -> None:
    got = choice.by_estimate(0.5e-3, 1.0e-3, 3)
    assert got.chosen == choice.MULTI and got.by == "cost-model" and "an estimate" in got.reason
    assert choice.by_estimate(0.9e-3, 1.0e-3, 3).chosen == choice.ONE


# -- schedule on CPU: the cost model decides ---------------------------------------------------
@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_cpu_schedule_hands_back_one_stream_where_the_model_promises_too_little() -> None:
    model, inputs, sm = _sched("resnet_stage")  # estimated 1.02x over one stream
    assert sm.plan.num_streams == 1 and sm.plan.syncs == [] and sm.plan.fork == []
    assert sm.plan.choice["chosen"] == "one-stream" and sm.plan.choice["by"] == "cost-model"
    assert sm.multi_stream_plan.num_streams == 2  # Nimble's plan is kept for inspection
    with torch.no_grad():
        assert torch.equal(sm(*inputs), model(*inputs))
    assert sm.simulate(*inputs, seed=1).ok
    doc = sm.plan.to_dict()
    assert doc["choice"]["reason"].startswith("estimated")
    assert any(n.startswith("one-stream graph, chosen by cost-model") for n in doc["notes"])


@pytest.mark.slow
def test_cpu_schedule_keeps_multi_stream_where_the_model_promises_enough() -> None:
    _, _, sm = _sched("nasnet_a_mobile")
    assert sm.plan.num_streams > 1 and sm.plan is sm.multi_stream_plan
    assert sm.plan.choice["chosen"] == "multi-stream" and sm.plan.choice["by"] == "cost-model"


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_streams_asked_by_name_and_bad_values() -> None:
    _, _, one = _sched("transformer_block", streams="one")
    assert one.plan.num_streams == 1 and one.plan.choice["by"] == "asked"
    multi = scheduled_zoo("transformer_block")[2]  # streams="multi"
    assert multi.plan.num_streams > 1 and multi.plan.choice["by"] == "asked"
    with pytest.raises(ValueError, match="streams"):
        _sched("transformer_block", streams="two")


# -- schedule on a device: measured (fake runners and timings) ---------------------------------
class _FakeRunner:
    def __init__(self, plan: Any) -> None:
        self.plan, self.graph, self.device = plan, object(), torch.device("cuda", 0)


def _cuda_leaves() -> list[Any]:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        return [torch.empty(2, 3, device="cuda")]


@pytest.mark.slow  # seconds of CPU: out of make test-fast
@pytest.mark.parametrize(("multi", "one", "chosen"), [(1.0, 2.0, 0), (2.0, 1.0, 1)])
def test_on_cuda_the_choice_is_measured_and_the_chosen_graph_kept(
    monkeypatch: pytest.MonkeyPatch, multi: float, one: float, chosen: int
) -> None:
    sm = scheduled_zoo("inception_v3")[2]
    plan = sm.multi_stream_plan
    made: list[Any] = []

    def captured(program: Any, plans: Any, leaves: Any, device: Any, warmup: int) -> Any:
        assert device.type == "cuda" and plans[0] is plan and plans[1].num_streams == 1
        made.extend(_FakeRunner(p) for p in plans)
        return tuple(made)

    def timed(graphs: Any) -> list[list[float]]:
        assert graphs == [r.graph for r in made]
        return [[multi * 1e-3] * 5, [one * 1e-3] * 5]

    monkeypatch.setattr(choice, "_captured", captured)
    monkeypatch.setattr(choice, "time_alternated_graphs", timed)
    got, runner = choice.choose_plan(
        sm.program, plan, _cuda_leaves(), streams="auto", cuda_graph=True, warmup=2,
        device_profile="h100",
    )  # fmt: skip
    assert runner is made[chosen] and got is made[chosen].plan
    assert got.choice["by"] == "measured"
    assert got.num_streams == (plan.num_streams if chosen == 0 else 1)


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_without_graphs_on_cuda_the_cost_model_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    sm = scheduled_zoo("resnet_stage")[2]
    monkeypatch.setattr(choice, "_captured", lambda *a: pytest.fail("nothing is captured"))
    got, runner = choice.choose_plan(
        sm.program, sm.multi_stream_plan, _cuda_leaves(), streams="auto", cuda_graph=False,
        warmup=2, device_profile="h100",
    )  # fmt: skip
    assert runner is None and got.choice["by"] == "cost-model" and got.num_streams == 1


# -- the command says which --------------------------------------------------------------------
@pytest.mark.slow
def test_the_command_says_which_plan_runs_and_how_it_was_chosen(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.json"
    schedule_command(
        "gpuopt.aot.zoo:resnet_stage", inputs=None, device_profile="h100", out=out,
        fmt="text",
    )  # fmt: skip
    text = capsys.readouterr().out
    assert "runs           one-stream graph, chosen by cost-model: estimated 1.0" in text
    assert "streams        2 (" in text  # the structure lines describe Nimble's plan
    doc = json.loads(out.read_text())
    assert doc["plan"]["num_streams"] == 1 and doc["plan"]["choice"]["chosen"] == "one-stream"
    assert doc["multi_stream_plan"]["num_streams"] == 2
    assert doc["estimate"]["kind"] == "estimate"


# -- the CUDA launch's host work, counted with fake streams and events --------------------------
class _Stream:
    def __init__(self, log: list[tuple[str, Any, Any]], name: str) -> None:
        self.log, self.name = log, name

    def wait_event(self, ev: Any) -> None:
        self.log.append(("wait", self.name, ev))


class _Event:
    made = 0

    def __init__(self, log: list[tuple[str, Any, Any]]) -> None:
        _Event.made += 1
        self.log = log

    def record(self, stream: Any) -> None:
        self.log.append(("record", stream.name, self))


@pytest.mark.slow
def test_cuda_launch_switches_streams_only_between_runs_and_reuses_its_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpuopt.aot import executor_cuda

    model, inputs, sm = scheduled_zoo("inception_v3")
    plan = sm.multi_stream_plan
    log: list[tuple[str, Any, Any]] = []
    origin = _Stream(log, "s0")
    streams = iter(_Stream(log, f"s{i}") for i in range(1, plan.num_streams))
    monkeypatch.setattr(executor_cuda, "_new_stream", lambda device: next(streams))
    monkeypatch.setattr(torch.cuda, "Event", lambda **kw: _Event(log))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: origin)
    monkeypatch.setattr(torch.cuda, "set_stream", lambda s: log.append(("set", s.name, None)))
    runner = executor_cuda.CudaPlanRunner(sm.program, plan, "cpu", use_graph=False)
    made = _Event.made
    with torch.no_grad():
        for _ in range(2):
            log.clear()
            out = runner(sm.program.flatten_inputs(inputs))
            assert torch.equal(out, model(*inputs))
            sets = [e for e in log if e[0] == "set"]
            assert len(sets) == executor_cuda.stream_switches(plan) < len(plan.order) / 4
            assert sets[-1][1] == "s0"  # back on the caller's stream
            seen: set[int] = set()
            for kind, _, ev in log:  # every wait follows a record of its event in this call
                if kind == "record":
                    seen.add(id(ev))
                elif kind == "wait":
                    assert id(ev) in seen
            waits = sum(1 for e in log if e[0] == "wait")
            assert waits == len(plan.syncs) + 2 * len(plan.fork)
    assert _Event.made == made  # no event created per call
