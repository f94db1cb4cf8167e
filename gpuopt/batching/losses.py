"""Losses applied only where a mask is set, reduced per sample as the loss reduces one sample.

``masked_loss(F.mse_loss, out, y)`` with ``y`` a :class:`~gpuopt.batching.Padded` target equals
``sum(F.mse_loss(out_i, y_i) for each sample i)`` (``batch_reduction="sum"``) or its mean over
the samples (``"mean"``), up to float rounding: the loss is computed unreduced on the padded
batch, the padded positions are dropped (``torch.where``, so a padded position's value never
reaches the sum) and each sample's real positions are reduced as the loss function reduces
(``"mean"``: over that sample's real elements; ``"sum"``). Class-index losses
(``cross_entropy``, ``nll_loss``) take inputs with the classes last, as one sample's ``(L, C)``
with ``(L,)`` targets; positions whose target is ``ignore_index`` leave the count, as in torch.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any, Literal

import torch
import torch.nn.functional as F

from gpuopt.batching.collate import Padded

Reduction = Literal["mean", "sum"]
BatchReduction = Literal["mean", "sum", "none"]

_CLASS_LOSSES = {F.cross_entropy, F.nll_loss}
_CLASS_MODULES = (torch.nn.CrossEntropyLoss, torch.nn.NLLLoss)


def _expand(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``mask`` with trailing (feature) dimensions added to broadcast over ``like``."""
    if mask.shape[0] != like.shape[0] or mask.dim() > like.dim():
        raise ValueError(
            f"a mask of shape {tuple(mask.shape)} does not cover values of shape "
            f"{tuple(like.shape)}"
        )
    while mask.dim() < like.dim():
        mask = mask.unsqueeze(-1)
    return mask.expand_as(like)


def masked_sum(values: torch.Tensor, mask: torch.Tensor, per_sample: bool = False) -> torch.Tensor:
    """The sum of ``values`` where ``mask`` is set (per sample: shape ``(B,)``)."""
    m = _expand(mask, values)
    kept = torch.where(m, values, torch.zeros((), dtype=values.dtype, device=values.device))
    return kept.flatten(1).sum(1) if per_sample else kept.sum()


def masked_mean(values: torch.Tensor, mask: torch.Tensor, per_sample: bool = False) -> torch.Tensor:
    """The mean of ``values`` over the positions where ``mask`` is set (per sample: each
    sample's mean over its own positions, shape ``(B,)``)."""
    m = _expand(mask, values)
    total = masked_sum(values, m, per_sample)
    count = m.flatten(1).sum(1) if per_sample else m.sum()
    return total / count.to(total.dtype)


def _unreduced(loss_fn: Any) -> tuple[Callable[..., torch.Tensor], Reduction, bool, int]:
    """``loss_fn`` returning one value per element, its own reduction, whether it takes class
    indices, and its ignore_index."""
    if isinstance(loss_fn, torch.nn.Module) and hasattr(loss_fn, "reduction"):
        own = loss_fn.reduction
        unreduced = copy.copy(loss_fn)  # shares its weights; only the reduction differs
        setattr(unreduced, "reduction", "none")  # noqa: B010 (typed as a Tensor | Module attribute)
        classes = isinstance(loss_fn, _CLASS_MODULES)
        ignore = int(getattr(loss_fn, "ignore_index", -100))
        return unreduced, "sum" if own == "sum" else "mean", classes, ignore
    classes = loss_fn in _CLASS_LOSSES
    return functools.partial(loss_fn, reduction="none"), "mean", classes, -100


def masked_loss(
    loss_fn: Callable[..., torch.Tensor],
    input: torch.Tensor | Padded,
    target: torch.Tensor | Padded,
    mask: torch.Tensor | None = None,
    *,
    sample_reduction: Reduction | None = None,
    batch_reduction: BatchReduction = "mean",
    **kwargs: Any,
) -> torch.Tensor:
    """``loss_fn`` (a ``torch.nn.functional`` loss or a loss module) on a padded batch, only where
    the mask is set (by default the target's own, when it is :class:`Padded`).

    Each sample's loss is reduced as ``loss_fn`` reduces (``sample_reduction``: its
    ``reduction``, "mean" unless the module says "sum"), then the samples' losses are summed,
    averaged or returned (``batch_reduction``). ``kwargs`` go to ``loss_fn``.
    """
    if isinstance(input, Padded):
        input = input.data
    if isinstance(target, Padded):
        mask = target.mask if mask is None else mask
        target = target.data
    fn, own, classes, ignore = _unreduced(loss_fn)
    if "reduction" in kwargs:
        own = kwargs.pop("reduction")
        if own not in ("mean", "sum"):
            raise ValueError(f"reduction={own!r}: masked_loss reduces with 'mean' or 'sum'")
    reduction = sample_reduction or own
    if classes and input.dim() == target.dim() + 1:
        flat = fn(input.reshape(-1, input.shape[-1]), target.reshape(-1), **kwargs)
        loss = flat.view(target.shape)
    else:
        loss = fn(input, target, **kwargs)
    if mask is None:
        mask = torch.ones(loss.shape[:1], dtype=torch.bool, device=loss.device)
    mask = _expand(mask.to(loss.device), loss)
    if classes:
        mask = mask & (target != ignore)
    kept = torch.where(mask, loss, torch.zeros((), dtype=loss.dtype, device=loss.device))
    with torch.no_grad():  # each position's weight: the sample's and the batch's reduction
        weights = mask.to(loss.dtype)
        if reduction == "mean":
            counts = weights.flatten(1).sum(1)
            weights = weights / counts.view(-1, *[1] * (weights.dim() - 1))
        if batch_reduction == "mean":
            weights = weights / loss.shape[0]
    weighted = kept * weights
    if batch_reduction == "none":
        return weighted.flatten(1).sum(1)
    return weighted.sum()


__all__ = ["masked_loss", "masked_mean", "masked_sum"]
