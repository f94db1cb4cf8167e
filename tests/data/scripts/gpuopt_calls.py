"""Counts the Python calls into gpuopt's code (and the C calls its code makes) per training step,
outside gpuopt's windows: a dispatch-bound step with a per-class loop of ``--classes`` classes
(3 tensor ops each). Writes {"ops_per_step": ..., "calls_per_step": ...} to the JSON path given.

    gpuopt profile --quiet gpuopt_calls.py OUT.json [--classes N]
"""

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import gpuopt

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--classes", type=int, default=10)
args = ap.parse_args()
torch.manual_seed(0)
C, STEPS, FROM, TO = args.classes, 40, 20, 30  # counted: steps 20-29 (gpuopt's windows: 2-7)
loader = DataLoader(
    TensorDataset(torch.randn(STEPS * 2, 3, 4, 4), torch.randint(0, C, (STEPS * 2, 4, 4))),
    batch_size=2,
)
model = nn.Conv2d(3, C, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
GPUOPT_DIR = os.path.dirname(gpuopt.__file__)
calls = 0
ops = 0


def count(frame, event, arg):  # noqa: ANN001, ANN202
    global calls
    if frame.f_code.co_filename.startswith(GPUOPT_DIR) and event in ("call", "c_call"):
        calls += 1


class CountOps(torch.utils._python_dispatch.TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        global ops
        ops += 1
        return func(*args, **(kwargs or {}))


for step, (x, seg) in enumerate(loader):
    if step == FROM:
        sys.setprofile(count)
    if step == TO:
        sys.setprofile(None)
    masks = torch.zeros(x.shape[0], C, 4, 4)
    for c in range(C):
        masks[:, c] = seg == c
    loss = F.binary_cross_entropy_with_logits(model(x), masks)
    opt.zero_grad()
    loss.backward()
    opt.step()
    loss.item()
with CountOps():  # one more step, its ops counted (not a profiled step: after the run's last)
    masks = torch.zeros(x.shape[0], C, 4, 4)
    for c in range(C):
        masks[:, c] = seg == c
    F.binary_cross_entropy_with_logits(model(x), masks).backward()
with open(args.out, "w") as fh:
    json.dump({"ops_per_step": ops, "calls_per_step": calls / (TO - FROM)}, fh)
