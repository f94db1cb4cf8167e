"""Planted: variable-length samples three ways: batch size 1, padded token batches, and a
per-sample loop over a batch."""

import torch
from torch.utils.data import DataLoader, Dataset

LENGTHS = [3, 5, 2, 8, 4, 6, 7, 1]


class Sequences(Dataset):
    """Sample i is a 1-D run of token ids 1..LENGTHS[i] (never 0: 0 is the pad id)."""

    def __len__(self) -> int:
        return len(LENGTHS)

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.arange(1, LENGTHS[i] + 1)


def pad_collate(samples: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    width = max(len(s) for s in samples)
    ids = torch.zeros(len(samples), width, dtype=torch.long)
    for row, s in enumerate(samples):
        ids[row, : len(s)] = s
    return {"input_ids": ids}


def one_at_a_time() -> DataLoader:
    return DataLoader(Sequences(), batch_size=1)


def padded(batch_size: int = 4) -> DataLoader:
    return DataLoader(Sequences(), batch_size=batch_size, collate_fn=pad_collate)


def per_sample_step(batch: dict[str, torch.Tensor], w: torch.Tensor) -> torch.Tensor:
    ids = batch["input_ids"]
    total = w.new_zeros(())
    for row in range(ids.shape[0]):  # PER-SAMPLE
        total = total + (ids[row].float() * w[: ids.shape[1]]).sum()
    return total
