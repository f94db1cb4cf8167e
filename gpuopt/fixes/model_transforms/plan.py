"""The model transforms' plan (the opt-in ``amp``, ``channels-last``, ``compile``): a run-time
transform of the model after its first step (:mod:`gpuopt.fixes.model_transforms.runtime`) and,
for compile and channels-last, one statement after the line that builds the optimizer
(:mod:`gpuopt.fixes.model_transforms.codemod`)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from gpuopt.fixes.kind import FixKind
from gpuopt.fixes.planned import PlanInput, PlannedFix, SourceEdit
from gpuopt.source import Rewrite

AMP = FixKind(
    "amp",
    "the model's forward under bf16 autocast, its outputs back in float32 (no GradScaler "
    "needed with bf16; --amp-dtype fp16: fp16 autocast with the loss scaled)",
    (),
    runtime=True,
    source=False,
    opt_in=True,
    expected="tensor-core math: often 1.5-3x on compute-bound steps of recent GPUs; on a "
    "CPU only where it has bf16 units",
    tolerance=5e-2,
    transform="bf16_autocast",
)

CHANNELS_LAST = FixKind(
    "channels-last",
    "the model's parameters in channels_last memory format (convolutional models)",
    (),
    runtime=True,
    source=True,
    opt_in=True,
    expected="convolutions with tensor cores avoid layout transposes: often 1.1-1.3x on a GPU",
    tolerance=1e-3,
    transform="channels_last",
)

COMPILE = FixKind(
    "compile",
    "model.compile() (torch.compile in place: the module keeps its class and state_dict)",
    ("launch-bound",),
    runtime=True,
    source=True,
    opt_in=True,
    expected="fewer, fused kernels: helps launch-bound steps most; compiling takes seconds "
    "to minutes first, left out of its measure",
    tolerance=1e-3,
    settle_steps=3,
    transform="compile",
)


def plan(kind: FixKind, inp: PlanInput) -> PlannedFix:
    """The opt-in model fixes: a run-time transform of the model after its first step, and
    (compile, channels-last) one statement after the line that builds its optimizer."""
    from gpuopt.fixes.model_transforms.codemod import (
        channels_last_statement,
        compile_statement,
    )

    transform = kind.transform
    what = kind.what
    if kind.name == "amp" and inp.amp_dtype == "fp16":
        transform = "fp16_autocast"
        what = (
            "the model's forward under fp16 autocast, its outputs back in float32, the loss "
            "scaled by a GradScaler"
        )
    fix = PlannedFix(kind, False, True, f"opt-in: {what}")
    fix.model_transforms = [transform]
    fix.settings = {"transform": transform}
    make = {"compile": compile_statement, "channels_last": channels_last_statement}.get(transform)
    if make is not None and inp.script_path is not None:
        fix.edits = [
            SourceEdit(inp.script_path, [], functools.partial(_after_optimizer, make=make))
        ]
    if transform == "bf16_autocast":
        fix.notes.append(
            "no source form yet: in your code, run the forward under "
            "torch.autocast(device_type, dtype=torch.bfloat16) and compute the loss in float32"
        )
    elif transform == "fp16_autocast":
        fix.notes.append(
            "no source form yet: in your code, run the forward under torch.autocast(device_type, "
            "dtype=torch.float16), then scaler = torch.amp.GradScaler(device_type); "
            "scaler.scale(loss).backward(); scaler.unscale_(optimizer) before clipping; "
            "scaler.step(optimizer); scaler.update()"
        )
    return fix


def _after_optimizer(text: str, name: str, make: Callable[[str], str]) -> Rewrite:
    from gpuopt.fixes.model_transforms.codemod import rewrite_after_optimizer

    return rewrite_after_optimizer(text, make, name=name)


__all__ = [
    "AMP",
    "CHANNELS_LAST",
    "COMPILE",
    "plan",
]
