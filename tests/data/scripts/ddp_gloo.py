"""DDP on CPU with gloo: run under torchrun (RANK/WORLD_SIZE from the environment)."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(8):
    opt.zero_grad()
    model(torch.randn(16, 32)).sum().backward()
    opt.step()
print(f"rank {rank} of {dist.get_world_size()} done, LOCAL_RANK={os.environ['LOCAL_RANK']}")
dist.destroy_process_group()
