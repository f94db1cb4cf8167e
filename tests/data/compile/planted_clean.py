"""Planted: a compiled model without a graph break or a recompile. argv[1]: the backend."""

import sys

import torch

BACKEND = sys.argv[1] if len(sys.argv) > 1 else "eager"


@torch.compile(backend=BACKEND)  # COMPILE
def step_loss(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:  # FORWARD
    return torch.tanh(x @ w).square().mean()


w = torch.randn(16, 16, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.01)
for _ in range(10):
    loss = step_loss(w, torch.randn(8, 16))
    opt.zero_grad()
    loss.backward()
    opt.step()
