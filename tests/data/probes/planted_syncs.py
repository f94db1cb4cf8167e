"""Planted: three host syncs per step at three known lines (markers name them)."""

import torch


def train_step(x: torch.Tensor, w: torch.Tensor) -> float:
    y = (x @ w).relu()
    loss = y.sum()
    value = loss.item()  # SYNC-ITEM
    if (y > 0).any():  # SYNC-BOOL
        value += 1.0
    idx = torch.nonzero(y)  # SYNC-NONZERO
    return value + float(idx.shape[0])
