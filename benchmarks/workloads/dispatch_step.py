"""A dispatch-bound training step: what a short GPU step looks like from the host's side.

The H200's first run (../shared/gpu-h200/README.md) timed gpuopt on a ~4 ms CUDA step of 267
ops: a small conv net, an 80-class mask built by a Python loop, ``.item()`` every step. On a
GPU almost all of such a step is the host's dispatch: Python, the dispatcher and the kernel
launch, microseconds per op. This script is that step on the CPU: tiny tensors, so each op costs
its dispatch and little else, one intra-op thread, a few hundred ops a step (``--classes``
sets the loop's length: 3 ops per class plus ~60 for the net, backward and optimizer), from an
in-memory DataLoader (``num_workers=0``), SGD, ``losses.append(loss.item())``. With ``--device
cuda`` it is that step on a GPU: the batch copied by blocking pageable ``.to()`` as in the H200's
test script, the sync of ``.item()`` closing each step.

It prints its own measures to stderr, the loop's steps after ``--skip`` warm-up steps left out:

* ``STEP_MEDIAN_MS`` — median wall time of a step (loader wait included), the script's own clock;
* ``STEP_CPU_MEDIAN_MS`` — median CPU time of the main thread per step (``time.thread_time``):
  what the training thread itself spent, less disturbed by other processes than wall time;
* ``LOOP_START``/``LOOP_END`` — wall-clock stamps (``time.time()``) of the loop.

    python benchmarks/workloads/dispatch_step.py [--steps 300] [--classes 80]
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
ap.add_argument("--steps", type=int, default=300)
ap.add_argument("--classes", type=int, default=80)
ap.add_argument("--batch", type=int, default=4)
ap.add_argument("--size", type=int, default=8, help="image side (pixels)")
ap.add_argument("--skip", type=int, default=10, help="warm-up steps left out of the medians")
ap.add_argument("--threads", type=int, default=1)
ap.add_argument(
    "--device", default="cpu", help="cuda: the step on a GPU (blocking pageable copies)"
)
args = ap.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)

C = args.classes
n = args.steps * args.batch
images = torch.randn(n, 3, args.size, args.size)
segs = torch.randint(0, C, (n, args.size, args.size))
loader = DataLoader(TensorDataset(images, segs), batch_size=args.batch, shuffle=False)
dev = torch.device(args.device)
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, C, 1)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
losses = []
wall, cpu = [], []
print(f"LOOP_START {time.time():.6f}", file=sys.stderr)
t_prev, c_prev = time.perf_counter(), time.thread_time()
for x, seg in loader:
    x, seg = x.to(dev), seg.to(dev)
    masks = torch.zeros(x.shape[0], C, args.size, args.size, device=dev)
    for c in range(C):
        masks[:, c] = seg == c
    out = model(x)
    loss = F.binary_cross_entropy_with_logits(out, masks)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    losses.append(loss.item())
    t, c_ = time.perf_counter(), time.thread_time()
    wall.append(t - t_prev)
    cpu.append(c_ - c_prev)
    t_prev, c_prev = t, c_
print(f"LOOP_END {time.time():.6f}", file=sys.stderr)
kept = slice(args.skip, None)
print(f"STEP_MEDIAN_MS {statistics.median(wall[kept]) * 1e3:.4f}", file=sys.stderr)
print(f"STEP_CPU_MEDIAN_MS {statistics.median(cpu[kept]) * 1e3:.4f}", file=sys.stderr)
print(f"sum of losses {sum(losses):.6f}")
