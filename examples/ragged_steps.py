"""Variable-length sequences trained two ways that leave a GPU idle.

- ``--mode loop`` (default): the collate function returns the samples as lists (they cannot be
  stacked), and each step loops over them, one forward per sample, summing their losses.
  ``gpuopt optimize`` rewrites that loop into one padded batch with a masked loss (fix
  ``padding``: the same loss and gradients up to float rounding).
- ``--mode one``: the DataLoader runs at batch size 1 because the samples differ in size.
  ``gpuopt optimize --fix padding-batch`` makes it padded, length-bucketed batches (a different
  optimisation: compared on the loss after the same number of samples).

The lengths are long-tailed (log-normal, median 12, 2 to 200 steps); the model works on each
position on its own (an MLP over the features), so padding changes no real position's result.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

DIM, HIDDEN, OUT = 8, 32, 4


class Sequences(Dataset):
    """Sample i: a (length_i, DIM) sequence and its (length_i, OUT) target."""

    def __init__(self, n: int, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        lengths = torch.empty(n).log_normal_(2.5, 0.8, generator=g).clamp(2, 200).long()
        w = torch.randn(DIM, OUT, generator=g)
        self.x = [torch.randn(int(n_i), DIM, generator=g) for n_i in lengths]
        self.y = [torch.sin(x @ w) for x in self.x]

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def as_lists(samples):
    """Collate to two lists: the samples as they are."""
    return [s[0] for s in samples], [s[1] for s in samples]


def train_loop(model, opt, loader, epochs):
    for epoch in range(epochs):
        for xs, ys in loader:
            opt.zero_grad()
            loss = 0.0
            for x, y in zip(xs, ys, strict=True):  # PER-SAMPLE
                out = model(x)
                loss = loss + F.mse_loss(out, y)
            loss.backward()
            opt.step()
        print(f"epoch {epoch}: last loss {float(loss):.4f}")


def train_one(model, opt, loader, epochs):
    for epoch in range(epochs):
        for x, y in loader:  # ONE-SAMPLE
            opt.zero_grad()
            out = model(x)
            loss = F.mse_loss(out, y)
            loss.backward()
            opt.step()
        print(f"epoch {epoch}: last loss {float(loss):.4f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["loop", "one"], default="loop")
    ap.add_argument("--samples", type=int, default=512)
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(0)
    data = Sequences(args.samples)
    model = nn.Sequential(nn.Linear(DIM, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.mode == "loop":
        loader = DataLoader(data, batch_size=16, shuffle=True, collate_fn=as_lists)
        train_loop(model, opt, loader, args.epochs)
    else:
        loader = DataLoader(data, batch_size=1, shuffle=True)  # BATCH-ONE
        train_one(model, opt, loader, args.epochs)


if __name__ == "__main__":
    main()
