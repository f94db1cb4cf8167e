"""A user's ~2 ms dispatch-bound step: what a short GPU step is on its host, written as users
write it.

A tiny conv net over 16x16 images, a per-class mask built by a Python loop (``--classes``:
3 tensor ops each), a DataLoader over a TensorDataset (``num_workers=0``, shuffled), Adam,
``loss.item()`` every step (the running loss a progress line prints), one intra-op thread.
Each op costs its dispatch and little else, so the step is the host's Python and dispatcher.

Prints to stderr, the first ``--skip`` steps left out: ``STEP_MEDIAN_MS`` (median wall time of
a step, loader wait included, the script's own clock) and ``LOOP_START``/``LOOP_END``
(``time.time()`` stamps of the loop).

    python benchmarks/workloads/user_loader_step.py [--steps 400] [--classes 60]
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
ap.add_argument("--steps", type=int, default=400)
ap.add_argument("--classes", type=int, default=60)
ap.add_argument("--skip", type=int, default=20, help="warm-up steps left out of the median")
args = ap.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)

C, B, S = args.classes, 8, 16
images = torch.randn(args.steps * B, 3, S, S)
labels = torch.randint(0, C, (args.steps * B, S, S))
loader = DataLoader(TensorDataset(images, labels), batch_size=B, shuffle=True)
model = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1),
    nn.BatchNorm2d(16),
    nn.ReLU(),
    nn.Conv2d(16, C, 1),
)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
running, times = 0.0, []
print(f"LOOP_START {time.time():.6f}", file=sys.stderr)
t_prev = time.perf_counter()
for x, y in loader:
    target = torch.zeros(x.shape[0], C, S, S)
    for c in range(C):
        target[:, c] = y == c
    loss = F.binary_cross_entropy_with_logits(model(x), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    running += loss.item()
    t = time.perf_counter()
    times.append(t - t_prev)
    t_prev = t
print(f"LOOP_END {time.time():.6f}", file=sys.stderr)
print(f"STEP_MEDIAN_MS {statistics.median(times[args.skip :]) * 1e3:.4f}", file=sys.stderr)
print(f"mean loss {running / len(times):.5f}")
