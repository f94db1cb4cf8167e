"""Planted: a small training step with an optimizer and a DataLoader whose dataset reads values
back (``.item()``, ``bool``): only the user's own ``loss.item()`` is a step sync on a CPU-only run;
the optimizer's internal reads and data loading are not."""

import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.full((4,), float(i))
        if x.sum() > 0:  # DATA-BOOL (data loading: not a step sync)
            x = x / x.sum().item()  # DATA-ITEM (data loading: not a step sync)
        return x, x.sum(dim=0, keepdim=True)


def make() -> tuple[torch.nn.Module, torch.optim.Optimizer, DataLoader]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    return model, opt, DataLoader(Squares(), batch_size=8)


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
    x, y = batch
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()  # OPT-STEP (the optimizer's own reads are not the user's syncs)
    return loss.item()  # LOSS-ITEM
