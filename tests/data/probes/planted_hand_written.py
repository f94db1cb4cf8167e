"""A hand-written GELU (minGPT's NewGELU) in a training step, and ordinary arithmetic beside it."""

import math

import torch


def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))  # GELU  # noqa: E501


def ordinary(x, y):
    return 0.5 * x * (1.0 + torch.tanh(y))  # ORDINARY


def train_step(w, x):
    h = gelu(x @ w)
    loss = (h + ordinary(h, x @ w)).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        w -= 0.01 * w.grad
        w.grad = None
