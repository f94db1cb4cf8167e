import sys

import torch

model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(4):
    opt.zero_grad()
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
sys.exit(int(sys.argv[1]))
