"""A small convolutional step with Adam, on the CPU: the workload of ``--fix amp --amp-dtype
fp16`` in benchmarks/bench_optimize.py. fp16 autocast on a CPU runs its convolutions far slower
than float32 (no fp16 units), so the fix must be measured slower and dropped.

``--amp fp16`` is the change written by hand: the model's forward under fp16 autocast, its output
back in float32, the loss scaled by ``torch.amp.GradScaler``. The benchmark compares gpuopt's
claim with gpuopt's own run-time form applied outside it (the same code), and shows this flag's
timing beside it, not compared.
"""

import argparse

import torch
from torch import nn

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=60)
ap.add_argument("--amp", choices=["none", "fp16"], default="none")
args = ap.parse_args()

torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1),
    nn.ReLU(),
    nn.Conv2d(16, 16, 3, padding=1),
    nn.ReLU(),
    nn.AdaptiveAvgPool2d(1),
    nn.Flatten(),
    nn.Linear(16, 10),
)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cpu", enabled=args.amp == "fp16")
x = torch.randn(8, 3, 32, 32)
y = torch.randint(0, 10, (8,))
for _ in range(args.steps):
    opt.zero_grad()
    if args.amp == "fp16":
        with torch.autocast("cpu", dtype=torch.float16):
            out = model(x)
        out = out.float()
    else:
        out = model(x)
    loss = nn.functional.cross_entropy(out, y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
