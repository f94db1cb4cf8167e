"""A training loop that reads its loss and accuracy back to the host every step (`.item()`), but
only prints them every 10 steps: on a GPU each read waits for the device to finish. `gpuopt
optimize examples/sync_metrics.py` rewrites the reads to accumulate on the device and read where
the script prints, and checks that it prints exactly the same.
"""

import torch
from torch import nn


def batches(n: int, batch: int):
    g = torch.Generator().manual_seed(1)
    for _ in range(n):
        x = torch.randn(batch, 32, generator=g)
        yield x, (x[:, 0] > 0).long()


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    running_loss = 0.0
    correct = 0
    seen = 0
    for step, (x, y) in enumerate(batches(200, 64)):
        opt.zero_grad()
        out = model(x)
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        running_loss += loss.item()  # a host sync every step
        correct += (out.argmax(1) == y).sum().item()  # and another
        seen += y.numel()
        if step % 10 == 9:
            print(f"step {step + 1}: loss {running_loss / 10:.4f} accuracy {correct / seen:.3f}")
            running_loss = 0.0
            correct = 0
            seen = 0


if __name__ == "__main__":
    main()
