"""A classifier trained at batch 4 (the shape of the PyTorch tutorials' CIFAR-10 classifier),
with an LSTM and dropout, that ends with an evaluation in ``model.eval()`` (as pytorch/examples'
``mnist_rnn`` does); ``--no-eval`` leaves the evaluation out."""

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(8, 32, batch_first=True)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.fc(self.drop(out[:, -1]))


torch.manual_seed(0)
data = TensorDataset(torch.randn(96, 12, 8), torch.randint(0, 4, (96,)))
loader = DataLoader(data, batch_size=4, shuffle=True)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
for _epoch in range(2):
    model.train()
    running = 0.0
    for x, y in loader:  # tiny: the training loop
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        running += loss.item()
if "--no-eval" not in sys.argv:
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in DataLoader(data, batch_size=32):
            correct += int((model(x).argmax(1) == y).sum())
    print("accuracy", correct / len(data))
