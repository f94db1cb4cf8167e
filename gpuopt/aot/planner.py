"""From a captured :class:`gpuopt.aot.capture.Program` to a :class:`gpuopt.aot.plan.Plan`.

:func:`plan_program` is the one path every captured graph takes, whether it comes from
``gpuopt.aot.schedule`` (inference, :mod:`gpuopt.aot.api`) or from AOTAutograd's forward and
backward graphs (training, :mod:`gpuopt.aot.training`): probe the graph on real inputs, derive
its dependences, assign streams, and decide when each value may be released.
:func:`buffers_restored` puts a model's buffers back after such a run, so that scheduling a model
has no side effect on it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from gpuopt.aot.capture import Program, dependence_edges, probe
from gpuopt.aot.plan import Plan, build_plan, release_policy

if TYPE_CHECKING:  # pragma: no cover
    import torch


def plan_program(
    program: Program, leaves: Sequence[Any], *, merge: bool = True
) -> tuple[Plan, Any]:
    """Probe ``program`` on ``leaves`` and plan it; returns the plan and the probe's outputs."""
    import torch

    with torch.no_grad():
        measured = probe(program, leaves)
    edges, notes = dependence_edges(program, measured.nodes)
    names = [n.name for n in program.compute]
    kernel = {n: measured.nodes[n].kind == "kernel" for n in names}
    plan = build_plan(names, edges, merge=merge, kernel=kernel)
    plan.ops = {n: measured.nodes[n].to_dict() for n in names}
    plan.memory = measured.memory()
    outputs = program.output_names()
    plan.release = release_policy(
        plan,
        {n: measured.nodes[n].storages for n in names},
        {n: program.reads(n) for n in names},
        keep=outputs,
        accesses={
            n: sorted(set(measured.nodes[n].reads) | set(measured.nodes[n].writes))
            for n in names
            if kernel[n]
        },
    )
    plan.capture = program.method
    plan.notes.extend(notes)
    return plan, measured.outputs


@contextlib.contextmanager
def buffers_restored(model: torch.nn.Module) -> Iterator[None]:
    """Run the block, then copy the model's buffers (e.g. BatchNorm running statistics) back to
    the values they had before it, whatever the block did to them."""
    import torch

    saved = [(buf, buf.detach().clone()) for buf in model.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for buf, value in saved:
                buf.copy_(value)
