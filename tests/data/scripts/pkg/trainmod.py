"""Run as `-m pkg.trainmod`: checks __name__, argv and sys.path[0] as python -m sets them."""
import os
import sys

import torch

assert __name__ == "__main__"
assert sys.argv[0].endswith(os.path.join("pkg", "trainmod.py")), sys.argv
assert sys.path[0] == os.getcwd(), (sys.path[0], os.getcwd())
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(int(sys.argv[1])):
    opt.zero_grad()
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
print("argv", sys.argv[1:])
