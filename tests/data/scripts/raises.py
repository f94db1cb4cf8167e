import torch


def broken_step(n):
    raise ValueError(f"planted failure after {n} steps")


model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(5):
    opt.zero_grad()
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
broken_step(5)
