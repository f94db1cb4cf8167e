"""A training loop whose steps take a fixed wall time (``--step-ms``: a tiny model's step, then a
sleep for the rest), with ``zero_grad(set_to_none=False)`` for gpuopt optimize's ``zero-grad``
fix to rewrite: the workload of the cost of ``gpuopt optimize`` in benchmarks/bench_optimize.py
(how long it runs on a 5 ms-step and on a 500 ms-step script). Its steps do not depend on the
machine's load, so what is measured is optimize's own schedule of runs.
"""

import argparse
import time

import torch
from torch import nn

ap = argparse.ArgumentParser()
ap.add_argument("--step-ms", type=float, default=5.0)
ap.add_argument("--steps", type=int, default=60)
args = ap.parse_args()

torch.manual_seed(0)
model = nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(8, 16), torch.randn(8, 4)
for _ in range(args.steps):
    t = time.perf_counter()
    opt.zero_grad(set_to_none=False)
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    time.sleep(max(args.step_ms / 1e3 - (time.perf_counter() - t), 0.0))
