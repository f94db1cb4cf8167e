"""Planted: a compiled model that logs from inside its forward, a print (BREAK-PRINT) and an
.item() read (BREAK-ITEM), each a graph break in the middle of the forward; `gpuopt optimize
--fix graph-breaks` moves both to the end of forward. argv[1]: the backend."""

import sys

import torch

BACKEND = sys.argv[1] if len(sys.argv) > 1 else "aot_eager"


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(32, 64)
        self.mid = torch.nn.Linear(64, 64)
        self.head = torch.nn.Linear(64, 1)
        self.last_scale = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.proj(x))
        print("hidden", tuple(h.shape))  # BREAK-PRINT
        scale = h.detach().abs().mean().item()  # BREAK-ITEM
        self.last_scale = scale
        z = torch.relu(self.mid(h))
        return self.head(z).mean()


torch.manual_seed(0)
model = Net()
model.compile(backend=BACKEND)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(16, 8, 32)
for step in range(int(sys.argv[2]) if len(sys.argv) > 2 else 12):
    loss = model(data[step % 16])
    opt.zero_grad()
    loss.backward()
    opt.step()
