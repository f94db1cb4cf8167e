"""A small training loop for the memory tests: an MLP with a DataLoader, AdamW, a loss module.

    python memory_train.py [--oom-at STEP] [--steps N] [--batch B]

``--oom-at STEP`` raises torch.OutOfMemoryError (with a CUDA-shaped message) in that step's
forward, as a GPU run that ran out of memory does.
"""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, oom_at: int = -1) -> None:
        super().__init__()
        self.calls = 0
        self.oom_at = oom_at
        self.body = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU())
        self.head = nn.Linear(256, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)  # memory: body
        self.calls += 1
        if self.calls - 1 == self.oom_at:
            raise torch.OutOfMemoryError(  # memory: oom
                "CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of "
                "39.38 GiB of which 1.02 GiB is free. Of the allocated memory 36.10 GiB is "
                "allocated by PyTorch, and 2.25 GiB is reserved by PyTorch but unallocated."
            )
        return self.head(h)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--oom-at", type=int, default=-1)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(
        torch.randn(args.batch * args.steps, 64), torch.randint(0, 10, (args.batch * args.steps,))
    )
    loader = DataLoader(data, batch_size=args.batch)  # memory: loader
    model = Net(args.oom_at)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    for x, y in loader:
        opt.zero_grad()
        out = model(x)  # memory: forward
        loss = loss_fn(out, y)
        acc = (out.argmax(1) == y).float().mean().item()  # a metric: not part of the loss
        loss.backward()
        opt.step()
    print(f"done, last accuracy {acc:.2f}")


if __name__ == "__main__":
    main()
