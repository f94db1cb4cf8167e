"""Parameters updated by hand, no optimizer (as pytorch/examples regression/main.py): the end of
each loss.backward() is the step boundary."""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
fc = torch.nn.Linear(4, 1)
for _ in range(12):
    x = torch.randn(32, 4)
    y = x.sum(1, keepdim=True)
    fc.zero_grad()
    output = F.smooth_l1_loss(fc(x), y)
    loss = output.item()  # PER-STEP-ITEM
    output.backward()
    for param in fc.parameters():
        param.data.add_(-0.1 * param.grad)
print("hand updates done")
