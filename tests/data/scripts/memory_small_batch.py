"""A step that is nothing but small ops: a deep, narrow MLP on batches of 4 (the memory tests'
``memory-headroom`` case: the GPU would be almost empty, the host busy launching).

    python memory_small_batch.py [--steps N]
"""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4 * args.steps, 16), torch.randint(0, 4, (4 * args.steps,)))
    loader = DataLoader(data, batch_size=4, shuffle=False)  # memory: small loader
    layers: list[nn.Module] = []
    for _ in range(24):
        layers += [nn.Linear(16, 16), nn.Tanh()]
    model = nn.Sequential(*layers, nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    total = 0.0
    for x, y in loader:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        total += float(loss.detach())
    print(f"mean loss {total / args.steps:.4f}")


if __name__ == "__main__":
    main()
