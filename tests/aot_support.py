"""Shared, cached fixtures for the gpuopt.aot tests: each small zoo model is captured once per
session."""

from __future__ import annotations

import functools
from typing import Any

ZOO_NAMES = ("inception_v3", "nasnet_a_mobile", "resnet_stage", "transformer_block")


@functools.cache
def scheduled_zoo(name: str) -> tuple[Any, tuple[Any, ...], Any]:
    """(model, example_inputs, ScheduledModule) for the small variant of a zoo model, with
    Nimble's multi-stream plan (``streams="multi"``: these tests are about the planner; the
    choice between it and one stream is tested in test_aot_choice.py)."""
    import warnings

    from gpuopt.aot import schedule, zoo

    model, inputs = zoo.ZOO[name]("small")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scheduled = schedule(model, inputs, streams="multi")
    return model, inputs, scheduled


# Zoo models whose output depends on their input by far more than the tests' tolerance (the small
# inception_v3's outputs for two random inputs differ by ~1e-8, in eager mode too: a check that
# two calls gave different outputs proves nothing on it).
INPUT_SENSITIVE = ("resnet_stage", "transformer_block")


def assert_outputs_survive_the_next_call(call: Any, eager: Any, x1: Any, x2: Any) -> None:
    """``call(x1)``'s output keeps its value after ``call(x2)``: the scheduled module hands back
    its own copy, not the CUDA graph's static output buffer that the next replay overwrites.

    Proved against eager outputs computed for each input, with inputs whose eager outputs differ
    by far more than the tolerance (an overwritten first output would equal the second), and
    with no storage shared between the two outputs."""
    import torch

    tol = {"rtol": 1e-3, "atol": 1e-4}
    with torch.no_grad():
        e1, e2 = eager(x1), eager(x2)
    # the premise: a first output overwritten by the second replay would be seen
    assert not torch.allclose(e1, e2, rtol=0.1, atol=1e-2), "inputs too alike to tell apart"
    a = call(x1)
    b = call(x2)
    if a.is_cuda:
        torch.cuda.synchronize()
    assert a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()
    assert torch.allclose(b, e2, **tol)
    assert torch.allclose(a, e1, **tol), "the first output changed when the second call ran"
