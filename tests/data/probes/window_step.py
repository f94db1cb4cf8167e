"""A training step's shape for the profiler window's user lines: a copy, a per-class loop, a
reduction and a sync, each on its own marked line."""

import torch


def step(state: dict) -> None:
    y = state["x"].to(torch.float64)  # TO
    masks = torch.zeros(4, 3)
    for c in range(3):
        masks[:, c] = y[:, 0] == c  # LOOP
    total = masks.sum()  # SUM
    state["losses"].append(total.item())  # ITEM
