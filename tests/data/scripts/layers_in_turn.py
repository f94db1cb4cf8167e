"""Each layer trained by its own optimizer, one layer after the other (the shape of
pytorch/examples' ``mnist_forward_forward``): the layers' ``train`` calls ``self.forward``
itself, so ``Module.__call__`` never runs while they train."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

EPOCHS = 6


class Layer(nn.Linear):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__(n_in, n_out)
        self.relu = nn.ReLU()
        self.opt = torch.optim.Adam(self.parameters(), lr=0.03)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def train(self, x_pos: torch.Tensor, x_neg: torch.Tensor) -> tuple:  # type: ignore[override]
        for _ in range(EPOCHS):
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            loss = torch.log1p(torch.exp(torch.cat([-g_pos + 2.0, g_neg - 2.0]))).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()  # in turn: the step of each layer's optimizer
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(256, 64)), batch_size=256)
(x,) = next(iter(loader))
layers = [Layer(64, 48).to("cpu"), Layer(48, 48).to("cpu")]
h_pos, h_neg = x, x.flip(0)
for layer in layers:
    h_pos, h_neg = layer.train(h_pos, h_neg)
with torch.no_grad():
    print("goodness", float(layers[0](x).pow(2).mean()))
