"""Trains forever; prints READY after 3 steps so a test can signal it."""
import os
import signal
import sys

import torch

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
mode = sys.argv[1] if len(sys.argv) > 1 else "loop"
i = 0
while True:
    opt.zero_grad()
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    i += 1
    if i == 3:
        print("READY", flush=True)
        if mode == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
        elif mode == "sigint":
            os.kill(os.getpid(), signal.SIGINT)
