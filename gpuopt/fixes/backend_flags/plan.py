"""The backend-flag fixes' plans: ``cudnn-benchmark`` (where the input shapes are static) and the
opt-in ``tf32``, each a run-time form (the flags set before the script starts) and a source edit
(the flags set at the top of the script: :mod:`gpuopt.fixes.backend_flags.codemod`)."""

from __future__ import annotations

import functools

from gpuopt.fixes.kind import FixKind
from gpuopt.fixes.planned import PlanInput, PlannedFix, Planner, SourceEdit
from gpuopt.model.records import given
from gpuopt.source import Rewrite

CUDNN_BENCHMARK = FixKind(
    "cudnn-benchmark",
    "torch.backends.cudnn.benchmark = True for static input shapes",
    (),
    runtime=True,
    source=True,
    gpu_only=True,
)

TF32 = FixKind(
    "tf32",
    "TF32 matmuls and convolutions (torch.backends.cuda.matmul.allow_tf32 and "
    "torch.backends.cudnn.allow_tf32)",
    (),
    runtime=True,
    source=True,
    opt_in=True,
    gpu_only=True,
    expected="float32 matmuls on Ampere or newer up to several times faster; ~1e-3 relative error",
    tolerance=1e-2,
)


def _flags_codemod(text: str, name: str, flags: dict[str, bool]) -> Rewrite:
    from gpuopt.fixes.backend_flags.codemod import rewrite_backend_flags

    return rewrite_backend_flags(text, flags, name=name)


def flags_planner(flags: dict[str, bool], why: str) -> Planner:
    def planner(kind: FixKind, inp: PlanInput) -> PlannedFix:
        fix = PlannedFix(kind, False, True, why, backend_flags=dict(flags))
        fix.settings = {k: v for k, v in flags.items()}
        if inp.script_path is not None:
            path = inp.script_path
            fix.edits = [SourceEdit(path, [], functools.partial(_flags_codemod, flags=flags))]
        return fix

    return planner


def plan_cudnn(kind: FixKind, inp: PlanInput) -> PlannedFix:
    ragged = given(inp.profile.ragged)
    if ragged is not None and any(r.distinct_shapes > 1 for r in given(ragged.loaders) or []):
        return PlannedFix(kind, False, False, "input shapes vary from batch to batch")
    return flags_planner({"torch.backends.cudnn.benchmark": True}, "the input shapes are static")(
        kind, inp
    )


plan_tf32 = flags_planner(
    {"torch.backends.cuda.matmul.allow_tf32": True, "torch.backends.cudnn.allow_tf32": True},
    "float32 matmuls and convolutions in TF32 (opt-in: changes numerics)",
)


__all__ = [
    "CUDNN_BENCHMARK",
    "TF32",
    "flags_planner",
    "plan_cudnn",
    "plan_tf32",
]
