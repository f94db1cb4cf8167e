"""The CUDA executor: real streams, events and CUDA-graph capture. Needs a GPU; skipped
elsewhere."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from aot_support import INPUT_SENSITIVE, assert_outputs_survive_the_next_call

from gpuopt.aot import schedule, zoo

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA device (streams, events, CUDA graphs)"
    ),
]

NAMES = ["inception_v3", "nasnet_a_mobile", "resnet_stage", "transformer_block"]


def _cuda(name: str, **kw):  # type: ignore[no-untyped-def]
    model, inputs = zoo.ZOO[name]("small")
    model = model.cuda()
    inputs = tuple(x.cuda() for x in inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model, inputs, schedule(model, inputs, **kw)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("graph", [True, False])
def test_cuda_outputs_match_eager(name: str, graph: bool) -> None:
    model, inputs, sm = _cuda(name, cuda_graph=graph)
    for step in range(4):
        x = tuple(torch.randn_like(t) for t in inputs) if step else inputs
        with torch.no_grad():
            expected = model(*x)
        got = sm(*x)
        torch.cuda.synchronize()
        assert torch.allclose(got, expected, rtol=1e-3, atol=1e-4), (name, step)
    runner = next(iter(sm._runners.values()))
    assert len(runner.side) == sm.plan.num_streams - 1
    assert (runner.graph is not None) == graph


@pytest.mark.parametrize("name", INPUT_SENSITIVE)
def test_outputs_survive_the_next_replay(name: str) -> None:
    """The graph's static output buffer is overwritten by every replay: the first call's output
    must be a copy that keeps eager's value for the first input after the second call."""
    model, inputs, sm = _cuda(name)
    x2 = torch.randn_like(inputs[0])
    assert_outputs_survive_the_next_call(lambda x: sm(x), model, inputs[0], x2)


def test_cuda_training_matches_eager() -> None:
    model, inputs = zoo.resnet_stage("small")
    model = model.cuda().train()
    ref = copy.deepcopy(model)
    x = torch.randn(2, *inputs[0].shape[1:], device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sm = schedule(model, (x,), training=True)
    for _ in range(3):
        out = sm(x)
        expected = ref(x)
        out.square().sum().backward()
        expected.square().sum().backward()
    torch.cuda.synchronize()
    assert torch.allclose(out, expected, rtol=1e-3, atol=1e-4)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.allclose(p.grad, q.grad, rtol=1e-3, atol=1e-3)
    assert sm.backward_plan is not None and sm.backward_plan.num_streams == 1
