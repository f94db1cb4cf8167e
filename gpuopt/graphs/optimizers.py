"""Optimizers inside a captured step: ``capturable=True`` where torch.optim has it.

Without it, Adam and its relatives keep their step count as a CPU tensor and compute the bias
correction in Python: a captured step would replay the first step's numbers for ever (and torch
refuses the capture). With it, the count and the correction live on the device and the update
is the same arithmetic up to float rounding (the correction computed in float32 on the device
instead of float64 on the host). SGD keeps no host state and needs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def hyperparameters(optimizers: Sequence[Any]) -> tuple[Any, ...]:
    """Every group's Python numbers (lr, betas, weight decay...): a captured step bakes them in,
    so a change (a learning-rate scheduler) needs another graph."""
    out: list[Any] = []
    for opt in optimizers:
        for group in opt.param_groups:
            out.append(
                tuple(
                    (k, v)
                    for k, v in sorted(group.items())
                    if k != "params" and isinstance(v, (bool, int, float, str, tuple))
                )
            )
    return tuple(out)


def make_capturable(optimizers: Sequence[Any]) -> list[str]:
    """Set ``capturable=True`` on every group of the optimizers that have it, and move state
    a previous step kept on the host (the step counts) to the parameters' device. Returns what
    it did, one line per optimizer changed."""
    import torch

    notes = []
    for opt in optimizers:
        if "capturable" not in opt.defaults:
            continue
        changed = False
        for group in opt.param_groups:
            if not group.get("capturable", False):
                group["capturable"] = True
                changed = True
            for p in group["params"]:
                state = opt.state.get(p, {})
                step = state.get("step")
                if isinstance(step, torch.Tensor) and step.device != p.device:
                    state["step"] = step.to(device=p.device, dtype=torch.float32)
        if changed:
            notes.append(f"{type(opt).__name__}: capturable=True (its step count on the device)")
    return notes


def params_of(optimizers: Sequence[Any]) -> list[Any]:
    return [p for opt in optimizers for g in opt.param_groups for p in g["params"]]


__all__ = ["hyperparameters", "make_capturable", "params_of"]
