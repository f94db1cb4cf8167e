"""Whole-step CUDA graphs on a machine without a GPU: the verdict on recorded steps, the observer
on CPU and on fake CUDA tensors, and the capture/replay machinery on a faithful stand-in for
``torch.cuda``'s graphs (tests/graphs_support.py), its training compared with eager."""

from __future__ import annotations

import copy
import random
import warnings
from typing import Any

import pytest
import torch
from graphs_support import FakeGraph, fake_cuda, step_state
from torch import nn

from gpuopt.graphs import CapturedStep, graphed_step
from gpuopt.graphs.observe import OpRecord, StepRecord, TensorMeta, observed
from gpuopt.graphs.optimizers import make_capturable
from gpuopt.graphs.verdict import optimizer_refusals, step_refusals


# -- the verdict, on recorded steps -------------------------------------------------------------
def _t(*shape: int, device: str = "cuda", value: float | None = None) -> TensorMeta:
    return TensorMeta(shape, "float32", device, value)


def _op(name: str = "aten.mm.default", **kw: Any) -> OpRecord:
    return OpRecord(
        name, kw.pop("inputs", (_t(4, 4), _t(4, 4))), kw.pop("outputs", (_t(4, 4),)), **kw
    )


def _steps(*ops: OpRecord, second: tuple[OpRecord, ...] | None = None) -> list[StepRecord]:
    return [StepRecord(list(ops)), StepRecord(list(second if second is not None else ops))]


def test_a_static_step_is_capturable() -> None:
    steps = _steps(
        _op(),
        _op("aten.add_.Tensor", scalars=(1,)),
        _op(inputs=(_t(), _t(device="cpu", value=2.0))),
    )
    assert step_refusals(steps, "cuda") == []


@pytest.mark.parametrize(
    ("step", "says"),
    [
        (_op("aten._local_scalar_dense.default", outputs=(), returns_scalar=True, site="t.py:9"),
         "t.py:9: the step reads a device value on the host (`aten._local_scalar_dense` at t.py:9"),
        (_op("aten.nonzero.default"), "`aten.nonzero` sizes its output from the data"),
        (_op("aten.bernoulli_.float", generator=True), "explicit torch.Generator"),
        (_op("aten.randperm.default", inputs=(), outputs=(_t(8, device="cpu"),), site="t.py:3"),
         "t.py:3: CPU work inside the step (`aten.randperm` at t.py:3)"),
        (_op("aten._to_copy.default", inputs=(_t(8, device="cpu"),), outputs=(_t(8),)),
         "a copy between host and device inside the step"),
    ],
)  # fmt: skip
def test_what_cannot_be_captured(step: OpRecord, says: str) -> None:
    (refusal,) = step_refusals(_steps(_op(), step), "cuda")
    assert refusal.says().startswith(says) or says in refusal.says()


def test_steps_that_differ() -> None:
    a = (_op(), _op("aten.relu.default"))
    other_op = step_refusals(_steps(*a, second=(_op(), _op("aten.sigmoid.default"))), "cuda")
    assert "other operators (operator 2: `aten.relu` then `aten.sigmoid`" in other_op[0].reason
    lr = step_refusals(
        _steps(
            _op("aten.add_.Tensor", scalars=(0.1,)),
            second=(_op("aten.add_.Tensor", scalars=(0.2,)),),
        ),
        "cuda",
    )
    assert "a number computed on the host changed between steps" in lr[0].reason
    assert "[0.1] then [0.2]" in lr[0].reason
    cpu_count = step_refusals(
        _steps(
            _op(inputs=(_t(device="cpu", value=1.0),)),
            second=(_op(inputs=(_t(device="cpu", value=2.0),)),),
        ),
        "cuda",
    )
    assert "1, 4x4 then 2, 4x4" in cpu_count[0].reason
    shape = step_refusals(_steps(_op(), second=(_op(inputs=(_t(3, 4), _t(4, 4))),)), "cuda")
    assert (
        "shapes changed between steps" in shape[0].reason
        and "4x4, 4x4 then 3x4, 4x4" in shape[0].reason
    )
    fewer = step_refusals(_steps(_op(), _op(), second=(_op(),)), "cuda")
    assert "2 and 1 operators" in fewer[0].reason


def test_host_random_draws_and_cpu_steps() -> None:
    steps = _steps(_op())
    steps[1].host_rng = ["random", "torch (CPU)"]
    assert "(random, torch (CPU))" in step_refusals(steps, "cuda")[0].reason
    # on a CPU run the CPU generator is the device's (dropout draws from it)
    assert "(random)" in step_refusals(steps, "cpu")[0].reason
    cpu_op = _op(inputs=(_t(4, device="cpu"),), outputs=(_t(4, device="cpu"),))
    assert step_refusals(_steps(cpu_op), "cpu") == []


def test_optimizers_without_a_capturable_mode_are_refused() -> None:
    p = [nn.Parameter(torch.zeros(2))]
    assert optimizer_refusals([torch.optim.SGD(p, lr=0.1), torch.optim.Adam(p)]) == []
    (lbfgs,) = optimizer_refusals([torch.optim.LBFGS(p)])
    assert "LBFGS steps with a closure" in lbfgs.says()
    assert (
        "Adagrad has no capturable mode" in optimizer_refusals([torch.optim.Adagrad(p)])[0].says()
    )


# -- the observer on a device (meta tensors: autograd on fake CUDA tensors needs a CUDA build) ---
@pytest.fixture
def meta_capturable(monkeypatch: pytest.MonkeyPatch) -> None:
    """``capturable=True`` accepted on the meta device, as on CUDA."""
    import torch.optim.adam as adam

    devices = adam._get_capturable_supported_devices
    monkeypatch.setattr(
        adam, "_get_capturable_supported_devices", lambda *a, **k: [*devices(*a, **k), "meta"]
    )


def _device_steps(step: Any, n: int = 3, **opt_kw: Any) -> list[StepRecord]:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to("meta")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True, **opt_kw)
    x = torch.empty(5, 8, device="meta")
    y = torch.zeros(5, dtype=torch.long, device="meta")
    records = []
    for k in range(n):
        rec = StepRecord()
        with observed(rec, "meta"):
            step(model, opt, x, y)
        if k:
            records.append(rec)
    return records


def _plain(model: nn.Module, opt: Any, x: Any, y: Any) -> None:
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def test_a_device_step_with_a_capturable_adam_can_be_captured(meta_capturable: None) -> None:
    records = _device_steps(_plain, capturable=True)
    assert len(records[0].ops) > 20
    assert {t.device for op in records[0].ops for t in op.inputs} == {"meta"}
    assert step_refusals(records, "meta") == []


def test_a_device_step_with_adam_counting_on_the_host_is_refused() -> None:
    (why,) = step_refusals(_device_steps(_plain, capturable=False), "meta")
    assert why.reason.startswith("a number computed on the host changed between steps")
    assert "test_graphs.py:" in why.site


def test_a_host_to_device_copy_in_a_device_step_is_named_with_its_line(
    meta_capturable: None,
) -> None:
    host = torch.ones(5, 8)

    def copies(model: nn.Module, opt: Any, x: Any, y: Any) -> None:
        scale = host.to("meta")  # the line named
        _plain(model, opt, x * scale, y)

    (why,) = step_refusals(_device_steps(copies, capturable=True), "meta")
    assert "test_graphs.py:" in why.site and "a copy between host and device" in why.reason


# -- the capture machinery on the stand-in ------------------------------------------------------
def _problem(seed: int = 0, batches: int = 12, momentum: float = 0.9) -> tuple[Any, ...]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 12), nn.BatchNorm1d(12), nn.ReLU(), nn.Linear(12, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=momentum, weight_decay=1e-4)
    data = [(torch.randn(8, 6), torch.randint(0, 3, (8,))) for _ in range(batches)]
    return model, opt, data


def _step_fn(model: nn.Module, opt: Any) -> Any:
    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return train_step


def _eager_run(data: list[Any]) -> tuple[list[float], nn.Module]:
    model, opt, _ = _problem()
    step = _step_fn(model, opt)
    return [float(step(x, y).detach()) for x, y in data], model


@pytest.mark.slow
def test_captured_training_equals_eager_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    model, opt, data = _problem()
    want, ref = _eager_run(data)
    with fake_cuda(monkeypatch, lambda: step_state(model, opt)):
        step = graphed_step(optimizers=[opt], modules=[model])(_step_fn(model, opt))
        kept = [step(x, y) for x, y in data]  # kept as tensors: clones, not the static output
    assert [float(t) for t in kept] == want
    for a, b in zip(model.state_dict().values(), ref.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    st = step.status
    assert (st.state, st.captures, st.first_capture_call, st.replays) == ("captured", 1, 4, 9)
    assert len(FakeGraph.made) == 1 and FakeGraph.made[0].replays == 9
    assert all(
        p.grad is g
        for p, g in zip(
            model.parameters(), step._graphs[next(iter(step._graphs))].grads, strict=True
        )
    )


@pytest.mark.slow
def test_gradients_come_back_after_an_eager_zero_grad(monkeypatch: pytest.MonkeyPatch) -> None:
    model, opt, data = _problem()
    want, _ = _eager_run(data)

    def step_only(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    with fake_cuda(monkeypatch, lambda: step_state(model, opt)):
        step = CapturedStep(step_only, [opt], [model])
        got = []
        for x, y in data:
            opt.zero_grad(set_to_none=True)  # outside the captured function
            got.append(float(step(x, y)))
            assert all(p.grad is not None for p in model.parameters())
    assert got == want and step.status.replays == 9


@pytest.mark.slow
def test_a_short_last_batch_and_a_new_learning_rate_get_their_own_graphs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def epochs(step: Any, opt: Any, data: list[Any]) -> list[float]:
        out = []
        for epoch in range(3):
            for g in opt.param_groups:
                g["lr"] = 0.05 if epoch < 2 else 0.01
            out += [float(step(x, y)) for x, y in data]
        return out

    model, opt, data = _problem(batches=5)
    data[-1] = (data[-1][0][:3], data[-1][1][:3])
    ref_model, ref_opt, _ = _problem(batches=5)
    want = epochs(_step_fn(ref_model, ref_opt), ref_opt, data)
    with fake_cuda(monkeypatch, lambda: step_state(model, opt)):
        step = CapturedStep(_step_fn(model, opt), [opt], [model])
        assert epochs(step, opt, data) == want
    st = step.status
    # full batches at lr 0.05; the short one (eager in epoch 1, captured in epoch 2); lr 0.01
    assert st.captures == 3 and len(step._graphs) == 3
    assert st.calls == 15 and st.replays + st.eager_calls + 3 == 15


@pytest.mark.slow
def test_a_host_read_in_the_step_is_refused_and_the_step_runs_eagerly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, opt, data = _problem()
    want, _ = _eager_run(data)
    seen: list[float] = []

    def reads(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = _step_fn(model, opt)(x, y)
        seen.append(loss.item())  # a sync inside the step
        return loss

    with fake_cuda(monkeypatch, lambda: step_state(model, opt)), pytest.warns(UserWarning) as w:
        step = CapturedStep(reads, [opt], [model])
        got = [float(step(x, y)) for x, y in data]
    assert got == want and seen == want
    assert step.status.state == "eager" and step.status.captures == 0
    assert (
        "reads a device value on the host (`aten._local_scalar_dense` at test_graphs.py:"
        in step.status.refusals[0]
    )
    # torch may warn first (a scalar read of a tensor that requires grad, once a process)
    assert any("is not captured" in str(x.message) for x in w) and not FakeGraph.made


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_a_python_random_draw_in_the_step_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    model, opt, data = _problem()

    def noisy(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return _step_fn(model, opt)(x * random.uniform(0.9, 1.1), y)

    with fake_cuda(monkeypatch, lambda: step_state(model, opt)), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = CapturedStep(noisy, [opt])
        for x, y in data:
            step(x, y)
    assert "draws random numbers on the host (random)" in step.status.refusals[0]


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_a_capture_waits_while_another_dispatch_mode_is_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Other(TorchDispatchMode):  # type: ignore[misc]
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            return func(*args, **(kwargs or {}))

    model, opt, data = _problem()
    want, _ = _eager_run(data)
    with fake_cuda(monkeypatch, lambda: step_state(model, opt)):
        step = CapturedStep(_step_fn(model, opt), [opt], [model])
        got = [float(step(x, y)) for x, y in data[:3]]
        with Other():  # a profiler's recorder window
            got += [float(step(x, y)) for x, y in data[3:6]]
        assert step.status.captures == 0 and step.status.eager_calls == 3
        got += [float(step(x, y)) for x, y in data[6:]]
    assert got == want and step.status.first_capture_call == 7


def test_a_failed_capture_falls_back_to_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    model, opt, data = _problem()
    want, _ = _eager_run(data)
    with (
        fake_cuda(monkeypatch, lambda: step_state(model, opt), fail=True),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        step = CapturedStep(_step_fn(model, opt), [opt], [model])
        got = [float(step(x, y)) for x, y in data]
    assert got == want
    assert step.status.refusals == [
        "the capture failed: RuntimeError: operation not permitted when stream is capturing"
    ]


@pytest.mark.slow
def test_outputs_of_replays_are_clones(monkeypatch: pytest.MonkeyPatch) -> None:
    model, opt, data = _problem()

    def two(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        out = model(x)
        loss = nn.functional.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss, out, 7

    with fake_cuda(monkeypatch, lambda: step_state(model, opt)):
        step = CapturedStep(two, [opt], [model])
        outs = [step(x, y) for x, y in data]
    losses = [o[0] for o in outs[4:]]
    assert len({float(t) for t in losses}) == len(losses)  # no two alias one buffer
    assert all(o[2] == 7 and not o[0].requires_grad for o in outs[4:])


# -- without a CUDA device ---------------------------------------------------------------------
@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_on_cpu_the_step_runs_as_written() -> None:
    model, opt, data = _problem()
    want, _ = _eager_run(data)
    step = CapturedStep(_step_fn(model, opt), [opt], [model])
    assert [float(step(x, y)) for x, y in data] == want
    assert step.status.state == "cpu" and step.status.captures == 0 and step.status.refusals == []


def test_on_cpu_the_analysis_can_run_and_trusts_capturable_optimizers() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 12), nn.Dropout(0.1), nn.Linear(12, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = CapturedStep(_step_fn(model, opt), [opt], [model], analyse_on_cpu=True)
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    for _ in range(5):
        x, y = torch.randn(4, 6), torch.randint(0, 3, (4,))
        state = torch.get_rng_state()
        got = step(x, y)
        torch.set_rng_state(state)
        assert torch.equal(got, _step_fn(ref, ref_opt)(x, y))
    assert step.status.refusals == [] and "could be captured" in step.status.notes[-1]

    def reads(x: torch.Tensor, y: torch.Tensor) -> float:
        return _step_fn(model, opt)(x, y).item()

    with pytest.warns(UserWarning, match="reads a device value on the host"):
        bad = CapturedStep(reads, [opt], analyse_on_cpu=True)
        for _ in range(4):
            bad(torch.randn(4, 6), torch.randint(0, 3, (4,)))


def test_make_capturable_moves_the_step_count_to_the_device(meta_capturable: None) -> None:
    model = nn.Linear(3, 2).to("meta")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.empty(4, 3, device="meta")).sum().backward()
    opt.step()  # not capturable: the step count is a CPU tensor
    assert opt.state[model.weight]["step"].device.type == "cpu"
    assert make_capturable([opt, torch.optim.SGD(model.parameters(), lr=0.1)]) == [
        "Adam: capturable=True (its step count on the device)"
    ]
    assert opt.param_groups[0]["capturable"] and make_capturable([opt]) == []
    assert opt.state[model.weight]["step"].device.type == "meta"
    opt.step()  # and the capturable update runs


@pytest.mark.slow
def test_a_step_defined_again_each_epoch_is_the_same_captured_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, opt, data = _problem()
    want, _ = _eager_run(data * 2)

    def train(batches: list[Any]) -> list[float]:  # as a script's train(epoch) is written
        @graphed_step(optimizers=[opt], modules=[model])
        def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss

        steps.append(train_step)
        return [float(train_step(x, y)) for x, y in batches]

    steps: list[Any] = []
    with fake_cuda(monkeypatch, lambda: step_state(model, opt)):
        got = train(data) + train(data)
    assert got == want and steps[0] is steps[1] and steps[0].status.captures == 1
    other = graphed_step(optimizers=[torch.optim.SGD(model.parameters(), lr=0.1)])(steps[0].fn)
    assert other is not steps[0]  # another optimizer: another step


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_forward_aot_runs_nimbles_plan_inside_the_captured_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.heads = nn.ModuleList(nn.Linear(16, 16) for _ in range(4))
            self.out = nn.Linear(64, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(torch.cat([h(x).relu() for h in self.heads], 1))

    def make() -> tuple[nn.Module, Any]:
        torch.manual_seed(0)
        model = Branchy()
        return model, torch.optim.SGD(model.parameters(), lr=0.05)

    data = [(torch.randn(8, 16), torch.randint(0, 3, (8,))) for _ in range(8)]
    ref, ref_opt = make()
    want = [float(_step_fn(ref, ref_opt)(x, y).detach()) for x, y in data]
    model, opt = make()
    with fake_cuda(monkeypatch, lambda: step_state(model, opt)), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = CapturedStep(_step_fn(model, opt), [opt], [model], forward="aot")
        got = [float(step(x, y)) for x, y in data]
    assert got == pytest.approx(want, rel=1e-6)
    note = next(n for n in step.status.notes if n.startswith("forward='aot'"))
    assert "streams inside the step's graph" in note, note
    assert step.status.refusals == [] and step.status.captures == 1
    with pytest.raises(ValueError, match="give the model"):
        CapturedStep(_step_fn(model, opt), [opt], forward="aot")


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the check runs")
def test_the_gpu_check_says_it_skipped_without_a_gpu() -> None:
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "check_graphs.py"
    r = subprocess.run(
        [sys.executable, str(script), "--budget", "5"], capture_output=True, text=True
    )
    assert r.returncode == 0 and r.stdout == "skipped: no CUDA device\n", r.stderr
