"""A training loop of small ops with a time.sleep in every step: the sleep is "other"
at its own line, never launch-bound."""

import time

import torch

torch.manual_seed(0)
weights = [torch.randn(8, 8, requires_grad=True) for _ in range(20)]
opt = torch.optim.SGD(weights, lr=0.01)
for _ in range(12):
    x = torch.randn(4, 8)
    for w in weights:
        x = torch.tanh(x @ w)
    loss = x.sum()
    opt.zero_grad()
    loss.backward()
    time.sleep(0.02)  # SLEEP
    opt.step()
