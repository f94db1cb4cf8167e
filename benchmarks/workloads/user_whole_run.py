"""A user's whole short CPU run (~5 s): a small conv net trained for 400 steps from a Dataset
held in memory, timed as a whole process (start-up, the loop and the end all count).

The Dataset is the user's own class (``__getitem__`` returns one normalised sample, the
DataLoader's default collate stacks them), 400 steps of batch 32 of 1x28x28 images, SGD with
momentum, ``loss.item()`` every 20 steps (a log line), one intra-op thread. Prints
``LOOP_START``/``LOOP_END`` stamps and ``STEP_MEDIAN_MS`` to stderr.

    python benchmarks/workloads/user_whole_run.py [--steps 400]
"""

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=400)
ap.add_argument("--batch", type=int, default=32)
args = ap.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)


class Digits(Dataset):
    def __init__(self, n: int) -> None:
        self.x = torch.rand(n, 1, 28, 28)
        self.y = torch.randint(0, 10, (n,))
        self.mean, self.std = self.x.mean(), self.x.std()

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (self.x[i] - self.mean) / self.std, self.y[i]


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 7 * 7, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


loader = DataLoader(Digits(args.steps * args.batch), batch_size=args.batch, shuffle=True)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
times = []
print(f"LOOP_START {time.time():.6f}", file=sys.stderr)
t_prev = time.perf_counter()
for step, (x, y) in enumerate(loader):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 20 == 0:
        print(f"step {step} loss {loss.item():.4f}")
    t = time.perf_counter()
    times.append(t - t_prev)
    t_prev = t
print(f"LOOP_END {time.time():.6f}", file=sys.stderr)
print(f"STEP_MEDIAN_MS {statistics.median(times[10:]) * 1e3:.4f}", file=sys.stderr)
