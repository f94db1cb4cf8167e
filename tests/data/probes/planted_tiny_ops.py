"""Planted: a step of 300 tiny element-wise ops (no loop, no sync): dispatch dominates."""

import torch


def train_step(x: torch.Tensor) -> torch.Tensor:
    for _ in range(100):
        x = (x * 1.0001 + 0.0001).relu()  # TINY-OPS
    return x
