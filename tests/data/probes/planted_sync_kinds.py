"""Planted: one of each kind of read-back a CPU-only run must flag as "would block on a GPU"."""

import torch


def train_step(x: torch.Tensor) -> list[object]:
    seen: list[object] = []
    seen.append(x.cpu().numpy())  # KIND-CPU (one sync: .numpy() of the result adds none)
    seen.append(x.tolist())  # KIND-TOLIST
    seen.append(int(x[0]))  # KIND-INT
    seen.append(float(x.mean()))  # KIND-FLOAT
    seen.append(f"{x.sum():.3f}")  # KIND-PRINT
    seen.append(x[x > 0])  # KIND-MASK
    y = x.clone()
    y[y > 100] = 0.0  # KIND-MASK-SET
    seen.append(torch.unique(x))  # KIND-UNIQUE
    seen.append(x.masked_fill(x > 100, 0.0))  # MASKED-FILL (fixed size: no sync)
    if x.max() > 100:  # KIND-BOOL
        seen.append(None)
    seen.append(x.numpy())  # NUMPY-ALONE (a CPU array even on a GPU run: no sync)
    return seen
