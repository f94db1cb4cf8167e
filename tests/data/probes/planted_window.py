"""Planted: step ``i`` issues ``i + 1`` ops at one line, so per-step counts tell exactly which
steps were recorded (on any device: no host syncs involved)."""

import torch

VALUE = torch.ones(3)


def train_step(i: int) -> torch.Tensor:
    total = VALUE
    for _ in range(i + 1):
        total = total + 1  # WINDOW-ADD
    return total


def ten_adds(i: int) -> torch.Tensor:
    a = VALUE
    a = a + 1; a = a + 1; a = a + 1; a = a + 1; a = a + 1  # TEN-ADDS  # noqa: E702
    a = a + 1; a = a + 1; a = a + 1; a = a + 1; a = a + 1  # noqa: E702
    return a
