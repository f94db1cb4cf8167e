"""An inference loop with no optimizer: steps marked with gpuopt.step()."""
import torch

import gpuopt

model = torch.nn.Linear(16, 16)
with torch.no_grad():
    for _ in range(7):
        model(torch.randn(8, 16))
        gpuopt.step()
print("done")
