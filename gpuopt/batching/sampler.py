"""A batch sampler that groups samples of similar length, so that padding wastes little.

Samples are put in buckets by length (``boundaries``: each bucket holds the lengths up to its
boundary; by default chosen from the lengths so that within a bucket the shortest is at least
``1 - max_waste`` of the longest). Every epoch, each bucket's samples are shuffled and cut into
batches, and the batches of all buckets are shuffled together — a seeded permutation of
``seed + epoch`` (:meth:`LengthBucketSampler.set_epoch`), the same on every rank; with
``seed=None`` on one process, a seed drawn from torch's default generator at each iteration (as
``RandomSampler`` does: every epoch differs, and ``torch.manual_seed`` repeats them). With
``num_replicas`` ranks, rank ``r`` takes batches ``r, r + num_replicas, ...``; the batch list is
first padded with batches from its start (or, with ``drop_last``, cut) to a multiple of
``num_replicas``, so every rank runs the same number of steps (a rank that runs fewer would hang
the others in their all-reduce).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import Sampler


def auto_boundaries(lengths: Sequence[int], max_waste: float) -> list[int]:
    """Bucket upper edges such that, within a bucket, the shortest length is at least
    ``1 - max_waste`` times the longest (so a batch padded to its longest sample wastes at
    most ``max_waste`` of it in its padded dimension)."""
    if not 0.0 < max_waste < 1.0:
        raise ValueError(f"max_waste must be between 0 and 1, got {max_waste}")
    distinct = sorted({max(int(n), 0) for n in lengths})
    out: list[int] = []
    low: int | None = None
    prev = 0
    for n in distinct:
        if low is None:
            low = n
        elif n * (1.0 - max_waste) > low:
            out.append(prev)
            low = n
        prev = n
    if distinct:
        out.append(distinct[-1])
    return out


class LengthBucketSampler(Sampler[list[int]]):
    """Batches of indices of similar ``lengths`` (one length per sample: its size along the
    padded dimension; :func:`sample_lengths` reads them from a Dataset).

    ``boundaries``: the buckets' upper edges (a length above the last one goes in the last
    bucket); give the same sizes to :class:`~gpuopt.batching.PadCollate` (``buckets=``) for a
    few static shapes. ``num_replicas``/``rank``: distributed sharding; when not given and
    ``torch.distributed`` is initialised, its world size and rank (several ranks need the
    same ``seed`` and :meth:`set_epoch`: without a seed, 0 is used).
    """

    def __init__(
        self,
        lengths: Sequence[int] | torch.Tensor,
        batch_size: int,
        *,
        boundaries: Sequence[int] | None = None,
        max_waste: float = 0.15,
        shuffle: bool = True,
        drop_last: bool = False,
        seed: int | None = None,
        num_replicas: int | None = None,
        rank: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        values = [int(n) for n in (lengths.tolist() if torch.is_tensor(lengths) else lengths)]
        if not values:
            raise ValueError("no lengths: the dataset is empty")
        num_replicas, rank = _replicas(num_replicas, rank)
        self.lengths = values
        self.batch_size = batch_size
        self.boundaries = (
            sorted({int(b) for b in boundaries})
            if boundaries is not None
            else auto_boundaries(values, max_waste)
        )
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.seed = seed if seed is not None or num_replicas == 1 else 0
        self.epoch = 0
        self.num_replicas = num_replicas
        self.rank = rank
        self.buckets: list[list[int]] = [[] for _ in self.boundaries]
        last = len(self.boundaries) - 1
        for i, n in enumerate(values):
            self.buckets[min(bisect.bisect_left(self.boundaries, n), last)].append(i)

    def set_epoch(self, epoch: int) -> None:
        """Shuffle differently in each epoch (call it before iterating, on every rank)."""
        self.epoch = epoch

    def _all_batches(self) -> list[list[int]]:
        gen = torch.Generator()
        if self.seed is None and self.shuffle:
            gen.manual_seed(int(torch.empty((), dtype=torch.int64).random_().item()))
        elif self.seed is not None:
            gen.manual_seed(self.seed + self.epoch)
        batches: list[list[int]] = []
        for bucket in self.buckets:
            order = (
                [bucket[int(j)] for j in torch.randperm(len(bucket), generator=gen)]
                if self.shuffle
                else list(bucket)
            )
            for start in range(0, len(order), self.batch_size):
                batch = order[start : start + self.batch_size]
                if len(batch) == self.batch_size or not self.drop_last:
                    batches.append(batch)
        if self.shuffle:
            batches = [batches[int(j)] for j in torch.randperm(len(batches), generator=gen)]
        return batches

    def _shard(self, batches: list[list[int]]) -> list[list[int]]:
        if self.num_replicas == 1:
            return batches
        n = len(batches)
        if self.drop_last:
            batches = batches[: n - n % self.num_replicas]
        elif n % self.num_replicas and n:
            extra = self.num_replicas - n % self.num_replicas
            batches = batches + [batches[i % n] for i in range(extra)]
        return batches[self.rank :: self.num_replicas]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._shard(self._all_batches()))

    def __len__(self) -> int:
        full = sum(
            len(b) // self.batch_size + (0 if self.drop_last or not len(b) % self.batch_size else 1)
            for b in self.buckets
        )
        if self.num_replicas == 1:
            return full
        if self.drop_last:
            return full // self.num_replicas
        return -(-full // self.num_replicas)


def _replicas(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    if num_replicas is None or rank is None:
        import torch.distributed as dist

        live = dist.is_available() and dist.is_initialized()
        if num_replicas is None:
            num_replicas = dist.get_world_size() if live else 1
        if rank is None:
            rank = dist.get_rank() if live else 0
    if num_replicas < 1 or not 0 <= rank < num_replicas:
        raise ValueError(f"rank {rank} is not in [0, {num_replicas})")
    return num_replicas, rank


def sample_lengths(dataset: Any, field: int | str | None = None, dim: int = 0) -> list[int]:
    """Each sample's size along ``dim`` (of its ``field`` when samples are tuples or mappings:
    by default the first), read by indexing the dataset once per sample — for a dataset that
    loads or decodes in ``__getitem__`` that is a full pass; pass the lengths yourself then."""
    out: list[int] = []
    for i in range(len(dataset)):
        sample = dataset[i]
        if isinstance(sample, dict):
            sample = sample[field if field is not None else next(iter(sample))]
        elif isinstance(sample, (tuple, list)):
            sample = sample[field if isinstance(field, int) else 0]
        shape = getattr(sample, "shape", None)
        if shape is None:
            raise ValueError(f"sample {i} has no shape (a {type(sample).__name__})")
        out.append(int(shape[dim]))
    return out


def padding_waste(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> float:
    """The share of padded positions when each batch is padded to its longest sample
    (one padded dimension)."""
    padded = real = 0
    for batch in batches:
        sizes = [lengths[i] for i in batch]
        padded += max(sizes) * len(sizes) if sizes else 0
        real += sum(sizes)
    return 1.0 - real / padded if padded else 0.0


__all__ = ["LengthBucketSampler", "auto_boundaries", "padding_waste", "sample_lengths"]
