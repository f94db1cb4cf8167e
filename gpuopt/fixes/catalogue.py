"""The fixes ``gpuopt optimize`` knows, in the order they are planned and reported: each fix's kind
(:class:`~gpuopt.fixes.kind.FixKind`: its ``--fix NAME``, what it is for and how it can reach a
run) and its planner, both from the fix's own module or folder. A new fix is its module or
folder plus one line in :data:`FIXES`."""

from __future__ import annotations

from gpuopt.fixes import (
    accumulation,
    batch_size,
    framework_knobs,
    fused_ops,
    graph_breaks,
    zero_grad,
)
from gpuopt.fixes.backend_flags import plan as backend_flags
from gpuopt.fixes.dataloader import plan as dataloader
from gpuopt.fixes.kind import FixKind
from gpuopt.fixes.loops import plan as loops
from gpuopt.fixes.model_transforms import plan as model_transforms
from gpuopt.fixes.pinned_copies import plan as pinned_copies
from gpuopt.fixes.planned import PlanInput, PlannedFix, Planner
from gpuopt.fixes.syncs import plan as syncs
from gpuopt.fixes.whole_step import plan as whole_step


def _framework_knobs(kind: FixKind, inp: PlanInput) -> PlannedFix:
    """framework-knobs' planner, told every fix's name: a framework's setting may be the
    framework's own form of another fix (``amp``), asked for by that fix's name."""
    return framework_knobs.plan(kind, inp, fixes=NAMES)


FIXES: tuple[tuple[FixKind, Planner], ...] = (
    (dataloader.KIND, dataloader.plan),
    (pinned_copies.KIND, pinned_copies.plan),
    (syncs.KIND, syncs.plan),
    (graph_breaks.KIND, graph_breaks.plan),
    (framework_knobs.KIND, _framework_knobs),
    (zero_grad.KIND, zero_grad.plan),
    (backend_flags.CUDNN_BENCHMARK, backend_flags.plan_cudnn),
    (loops.VECTORIZE, loops.plan),
    (loops.PADDING, loops.plan),
    (whole_step.CUDA_GRAPHS, whole_step.plan_cuda_graphs),
    (whole_step.AOT, whole_step.plan_aot),
    (model_transforms.AMP, model_transforms.plan),
    (backend_flags.TF32, backend_flags.plan_tf32),
    (model_transforms.CHANNELS_LAST, model_transforms.plan),
    (model_transforms.COMPILE, model_transforms.plan),
    (loops.PADDING_BATCH, loops.plan_padding_batch),
    (fused_ops.KIND, fused_ops.plan),
    (batch_size.KIND, batch_size.plan),
    (accumulation.KIND, accumulation.plan),
)

CATALOGUE: tuple[FixKind, ...] = tuple(kind for kind, _ in FIXES)
BY_NAME: dict[str, FixKind] = {k.name: k for k in CATALOGUE}
NAMES: tuple[str, ...] = tuple(BY_NAME)
PLANNERS: dict[str, Planner] = {kind.name: planner for kind, planner in FIXES}

__all__ = ["BY_NAME", "CATALOGUE", "FIXES", "NAMES", "PLANNERS", "FixKind"]
