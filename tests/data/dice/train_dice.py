"""A tiny segmentation training (gpuopt's own) with a per-class Dice loss: loss = 0.5 * CE +
0.5 * Dice(softmax), 9 classes. The loss is dice.py's ClassDice; the public-script test runs the
same loop on TransUNet's DiceLoss (tests/test_optimize_loops.py)."""
import torch
from dice import ClassDice as DiceLoss
from torch import nn

NUM_CLASSES = 9
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, NUM_CLASSES, 1))
ce_loss = nn.CrossEntropyLoss()
dice_loss = DiceLoss(NUM_CLASSES)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for _ in range(40):
    image_batch = torch.randn(4, 1, 32, 32)
    label_batch = torch.randint(0, NUM_CLASSES, (4, 32, 32)).float()
    outputs = model(image_batch)
    loss_ce = ce_loss(outputs, label_batch[:].long())
    loss_dice = dice_loss(outputs, label_batch, softmax=True)
    loss = 0.5 * loss_ce + 0.5 * loss_dice
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print(f"final loss {loss.item():.4f}")
