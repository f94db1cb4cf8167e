"""A user's long step (≥ 50 ms): a wider conv net on 64x64 images, 30 steps, a DataLoader
over a TensorDataset, AdamW, ``loss.item()`` every step, one intra-op thread. Prints
``STEP_MEDIAN_MS`` (the script's own median step after 5 warm-up steps) and
``LOOP_START``/``LOOP_END`` to stderr.

    python benchmarks/workloads/user_long_step.py [--steps 30]
"""

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=30)
ap.add_argument("--width", type=int, default=32)
args = ap.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)
B = 16
data = TensorDataset(
    torch.randn(args.steps * B, 3, 64, 64), torch.randint(0, 10, (args.steps * B,))
)
loader = DataLoader(data, batch_size=B, shuffle=True)
w = args.width
model = nn.Sequential(
    nn.Conv2d(3, w, 3, padding=1),
    nn.ReLU(),
    nn.Conv2d(w, w, 3, padding=1),
    nn.ReLU(),
    nn.MaxPool2d(4),
    nn.Flatten(),
    nn.Linear(w * 16 * 16, 10),
)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
times = []
print(f"LOOP_START {time.time():.6f}", file=sys.stderr)
t_prev = time.perf_counter()
for x, y in loader:
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    loss.item()
    t = time.perf_counter()
    times.append(t - t_prev)
    t_prev = t
print(f"LOOP_END {time.time():.6f}", file=sys.stderr)
print(f"STEP_MEDIAN_MS {statistics.median(times[5:]) * 1e3:.4f}", file=sys.stderr)
