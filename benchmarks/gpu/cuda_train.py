"""A small CUDA training run with the GPU-only problems gpuopt fixes: pageable, blocking
host-to-device copies of every batch, a per-step `.item()`, and a convolution whose input shape
never changes (cudnn.benchmark). Used by `make gpu-check` only."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(2048, 3, 64, 64), torch.randint(0, 10, (2048,)))
    loader = DataLoader(data, batch_size=64, shuffle=True)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(8),
        nn.Flatten(),
        nn.Linear(32 * 64, 10),
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    running = 0.0
    for epoch in range(3):
        for step, (x, y) in enumerate(loader):
            x = x.to("cuda")
            y = y.to("cuda")
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            running += loss.item()
            if step % 10 == 9:
                print(f"epoch {epoch} step {step + 1}: loss {running / 10:.4f}")
                running = 0.0


if __name__ == "__main__":
    main()
