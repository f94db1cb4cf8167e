"""LBFGS with a closure (as pytorch/examples time_sequence_prediction/train.py): the closure runs
forward, ``loss.item()`` and backward several times inside each optimizer.step(); a prediction
loop with its own ``.item()`` runs after training, after the last step boundary."""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=2)
opt_args = parser.parse_args()
torch.manual_seed(0)
x = torch.randn(64, 8)
target = torch.randn(64, 1)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=6)
for _ in range(opt_args.steps):  # TRAIN-LOOP

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), target)
        print("loss:", loss.item())  # CLOSURE-ITEM
        loss.backward()
        return loss

    optimizer.step(closure)
with torch.no_grad():  # prediction, after training
    h = x[:3]
    for _ in range(200):
        h = h + 0.01 * model(h).sum().item()  # PREDICT-ITEM
print("lbfgs done")
