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
