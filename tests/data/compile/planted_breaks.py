"""Planted: a compiled model with three graph breaks at known lines (the markers name them) and
a sequence length that changes once, at step 5 (a recompile). argv[1]: the backend."""

import sys

import torch

BACKEND = sys.argv[1] if len(sys.argv) > 1 else "eager"
STEPS = 10


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # FORWARD
        h = torch.relu(self.proj(x))
        print("hidden", h.shape)  # BREAK-PRINT
        stat = h.abs().mean().item()  # BREAK-ITEM
        if h.sum() > 0:  # BREAK-IF
            h = h * 2
        self.last_stat = stat
        return self.head(h).mean()


model = Net()
model.compile(backend=BACKEND)  # COMPILE
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(STEPS):
    seq = 8 if step < 5 else 12  # the sequence length changes once
    x = torch.randn(4, seq, 16)
    loss = model(x)  # CALL
    opt.zero_grad()
    loss.backward()
    opt.step()
