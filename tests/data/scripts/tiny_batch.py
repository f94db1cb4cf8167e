"""The PyTorch tutorials' CIFAR-10 classifier's shape on fake data: LeNet at batch 4, SGD."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


torch.manual_seed(0)
train = TensorDataset(torch.randn(120, 3, 32, 32), torch.randint(0, 10, (120,)))
test = TensorDataset(torch.randn(40, 3, 32, 32), torch.randint(0, 10, (40,)))
trainloader = DataLoader(train, batch_size=4, shuffle=True)  # TRAIN-LOADER
testloader = DataLoader(test, batch_size=4)
images, labels = next(iter(testloader))  # TEST-PEEK: a look at a test batch, as the tutorial does
net = Net()
criterion = nn.CrossEntropyLoss()
optimizer = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
for data in trainloader:  # TRAIN-LOOP
    inputs, labels = data
    optimizer.zero_grad()
    loss = criterion(net(inputs), labels)
    loss.backward()
    optimizer.step()
correct = 0
with torch.no_grad():
    for images, labels in testloader:
        correct += (net(images).argmax(1) == labels).sum().item()
print(correct)
