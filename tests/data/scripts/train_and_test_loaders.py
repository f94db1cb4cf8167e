"""A training loader (batch 64, 200 samples: a last batch of 8) and a test loader (batch 128)
iterated under torch.no_grad() after each epoch, as pytorch/examples mnist and vae do."""
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
train = DataLoader(TensorDataset(torch.randn(200, 4), torch.randn(200, 1)), batch_size=64)
test = DataLoader(TensorDataset(torch.randn(300, 4), torch.randn(300, 1)), batch_size=128)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _epoch in range(3):
    for x, y in train:  # TRAIN-LOOP
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    with torch.no_grad():
        for x, _y in test:  # TEST-LOOP
            model(x)
