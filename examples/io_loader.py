"""A small CPU training run whose Dataset waits on I/O: each sample sleeps ~2 ms, as reading a
file from a network disk would. Waiting, unlike decoding, does not need a core, so DataLoader
workers help past the machine's core count: `gpuopt optimize examples/io_loader.py --apply`
finds the setting by timing the DataLoader alone, and proves the training is unchanged.
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class FileDataset(Dataset):
    """Synthetic samples that each take `wait_s` to "read" (a sleep: I/O, not CPU work)."""

    def __init__(self, n: int, wait_s: float) -> None:
        self.n = n
        self.wait_s = wait_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        time.sleep(self.wait_s)
        g = torch.Generator().manual_seed(i)
        return torch.randn(64, generator=g), i % 10


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--samples", type=int, default=480)
    ap.add_argument("--wait-ms", type=float, default=2.0)
    args = ap.parse_args()

    torch.manual_seed(0)
    loader = DataLoader(FileDataset(args.samples, args.wait_ms / 1e3), batch_size=args.batch_size, shuffle=True)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
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
        print(f"epoch {epoch}: mean loss {float(total) / len(loader):.4f}")


if __name__ == "__main__":
    main()
