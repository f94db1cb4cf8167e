"""A small CPU training run whose Dataset is slow: each sample costs ~1.5 ms of Python work.

With the default ``--num-workers 0`` the training loop spends most of each step waiting in
``next(loader)``; ``gpuopt profile examples/slow_dataset.py`` says so, at the loop's line, and
names the DataLoader knob to turn. Try ``--num-workers 2`` to see the wait shrink.
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    """Synthetic images whose "decoding" busy-waits, as JPEG decoding or augmentation would."""

    def __init__(self, n: int, cost_s: float) -> None:
        self.n = n
        self.cost_s = cost_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        end = time.perf_counter() + self.cost_s
        while time.perf_counter() < end:  # CPU work, not sleep: it competes for cores like real decoding
            pass
        g = torch.Generator().manual_seed(i)
        x = torch.randn(3, 16, 16, generator=g)
        return x, i % 10


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--samples", type=int, default=320)
    ap.add_argument("--num-workers", type=int, default=0)
    ap.add_argument("--sample-cost-ms", type=float, default=1.5)
    args = ap.parse_args()

    torch.manual_seed(0)
    loader = DataLoader(
        SlowDataset(args.samples, args.sample_cost_ms / 1e3),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.num_workers,
    )
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        total = 0.0
        for x, y in loader:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            total += loss.detach()
        print(f"epoch {epoch}: mean loss {float(total) / len(loader):.3f}")


if __name__ == "__main__":
    main()
