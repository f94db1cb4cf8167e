"""The overhead benchmark's workload: a 200-step CPU training run of a small MLP.

One intra-op thread by default, as the host side of a GPU training job runs: with two OpenMP
threads on a 2-core machine every run's time swings by ±10% with whatever else the host does,
which would drown the overhead being measured. In-memory data through a DataLoader (so the
DataLoader probe is exercised on every batch), an optimizer step per batch (so the step hook
fires), a .item() every 10 steps (as logging does).

The script prints the wall-clock time (``time.time()``) at which its training loop starts and
ends to stderr, so the benchmark can split each run into before-loop, loop and after-loop parts:
the loop is where a per-step overhead would show, the two ends where fixed costs do. It also
prints its own median step (``STEP_MEDIAN_MS``, wall, after 10 warm-up steps) and the main
thread's median CPU time per step (``STEP_CPU_MEDIAN_MS``).
"""

import argparse
import statistics
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=200)
ap.add_argument("--batch", type=int, default=256)
ap.add_argument("--width", type=int, default=1024)
ap.add_argument(
    "--threads", type=int, default=1, help="torch intra-op threads (1: the host side of a GPU job)"
)
args = ap.parse_args()
torch.set_num_threads(args.threads)

torch.manual_seed(0)
n = args.steps * args.batch
data = TensorDataset(torch.randn(n, 256), torch.randint(0, 10, (n,)))
loader = DataLoader(data, batch_size=args.batch, shuffle=True)
model = nn.Sequential(
    nn.Linear(256, args.width),
    nn.ReLU(),
    nn.Linear(args.width, args.width),
    nn.ReLU(),
    nn.Linear(args.width, 10),
)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
print(f"LOOP_START {time.time():.6f}", file=sys.stderr)
wall, cpu = [], []
t_prev, c_prev = time.perf_counter(), time.thread_time()
for step, (x, y) in enumerate(loader):
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    if step % 10 == 0:
        last = loss.item()
    t, c = time.perf_counter(), time.thread_time()
    wall.append(t - t_prev)
    cpu.append(c - c_prev)
    t_prev, c_prev = t, c
print(f"LOOP_END {time.time():.6f}", file=sys.stderr)
# the script's own clock: median step after 10 warm-up steps (loader wait included)
print(f"STEP_MEDIAN_MS {statistics.median(wall[10:]) * 1e3:.4f}", file=sys.stderr)
print(f"STEP_CPU_MEDIAN_MS {statistics.median(cpu[10:]) * 1e3:.4f}", file=sys.stderr)
print(f"final loss {last:.3f}")
