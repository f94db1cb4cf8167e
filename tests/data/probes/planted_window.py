"""Planted: step ``i`` reads ``i + 1`` values back at one line, so per-step counts tell exactly
which steps were recorded."""

import torch

VALUE = torch.ones(3)


def train_step(i: int) -> float:
    total = 0.0
    for _ in range(i + 1):
        total += VALUE.sum().item()  # WINDOW-ITEM
    return total


def ten_adds(i: int) -> torch.Tensor:
    a = VALUE
    a = a + 1; a = a + 1; a = a + 1; a = a + 1; a = a + 1  # TEN-ADDS  # noqa: E702
    a = a + 1; a = a + 1; a = a + 1; a = a + 1; a = a + 1  # noqa: E702
    return a
