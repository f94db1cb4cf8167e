"""Planted-stall ground truth: the script measures its own blocked time in next(loader).

Every 3rd batch costs STALL seconds to produce; the script times each next() call itself and
writes the true data-wait share of the measured steps (after warm-up) to the file in argv[1].
"""
import json
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

STALL = 0.012
COMPUTE = 0.006
WARMUP = 2


class Stalling(Dataset):
    def __len__(self):
        return 60

    def __getitem__(self, i):
        if i % 3 == 0:
            end = time.perf_counter() + STALL
            while time.perf_counter() < end:
                pass
        return torch.full((4,), float(i))


model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
loader = DataLoader(Stalling(), batch_size=1, shuffle=False)
it = iter(loader)
waits, steps = [], []
last = time.perf_counter()
while True:
    t0 = time.perf_counter()
    try:
        x = next(it)
    except StopIteration:
        break
    waits.append(time.perf_counter() - t0)
    end = time.perf_counter() + COMPUTE
    while time.perf_counter() < end:  # the "GPU work" of this step
        pass
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
    now = time.perf_counter()
    steps.append(now - last)
    last = now
m_w, m_s = waits[WARMUP:], steps[WARMUP:]
truth = {
    "data_wait": sum(m_w) / sum(m_s),
    "steps": len(steps),
    # the plant is real whatever the machine's load: every third next() blocked >= STALL
    "stalled_min_s": min(waits[::3]),
    "stall_s": STALL,
}
json.dump(truth, open(sys.argv[1], "w"))
