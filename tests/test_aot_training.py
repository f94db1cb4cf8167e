"""Training as in Nimble: multi-stream forward graph, single-stream backward graph (CPU checks)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from gpuopt.aot import schedule, zoo


def _train_pair(name: str, batch: int = 2):  # type: ignore[no-untyped-def]
    model, inputs = zoo.ZOO[name]("small")
    model.train()
    x = torch.randn(batch, *inputs[0].shape[1:])
    return model, copy.deepcopy(model), (x,)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet_stage", "transformer_block"])
def test_training_gradients_and_buffers_match_eager(name: str) -> None:
    model, ref, inputs = _train_pair(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sm = schedule(model, inputs, training=True)
    # Scheduling ran one forward but left the buffers alone and computed no gradient.
    for a, b in zip(model.buffers(), ref.buffers(), strict=True):
        assert torch.equal(a, b)
    assert all(p.grad is None for p in model.parameters())
    for step in range(2):
        x = torch.randn_like(inputs[0]) if step else inputs[0]
        out = sm(x)
        expected = ref(x)
        assert torch.allclose(out, expected, rtol=1e-5, atol=1e-6)
        (out.square().sum()).backward()
        (expected.square().sum()).backward()
        for (pn, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
            assert torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-6), pn
        for a, b in zip(model.buffers(), ref.buffers(), strict=True):
            assert torch.allclose(a.float(), b.float(), atol=1e-6)


@pytest.mark.slow
def test_training_forward_is_multi_stream_and_backward_single_stream() -> None:
    model, _, inputs = _train_pair("transformer_block")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sm = schedule(model, inputs, training=True, streams="multi")
    assert sm.plan.num_streams >= 2 and sm.plan.syncs
    assert sm.backward_plan is None  # not compiled until the first backward
    sm(*inputs).sum().backward()
    bp = sm.backward_plan
    assert bp is not None and bp.num_streams == 1 and bp.syncs == [] and bp.fork == []
    for seed in range(5):
        assert sm.simulate(seed=seed).ok
        assert sm.simulate(seed=seed, part="backward").ok
    est = sm.estimate("h100")
    assert est.eager_s > est.multistream_s


@pytest.mark.slow
def test_training_rejects_other_shapes() -> None:
    model, _, inputs = _train_pair("transformer_block")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sm = schedule(model, inputs, training=True)
    with pytest.raises(ValueError, match="static"):
        sm(torch.randn(3, *inputs[0].shape[1:]))


@pytest.mark.slow
def test_training_forward_plan_is_chosen_by_the_cost_model() -> None:
    model, _, inputs = _train_pair("resnet_stage")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sm = schedule(model, inputs, training=True)
        one = schedule(copy.deepcopy(model), inputs, training=True, streams="one")
    chosen = sm.plan.choice
    assert chosen["by"] == "cost-model" and chosen["streams_planned"] > 1
    assert (sm.plan.num_streams == 1) == (chosen["chosen"] == "one-stream")
    assert one.plan.num_streams == 1 and one.plan.choice["by"] == "asked"
