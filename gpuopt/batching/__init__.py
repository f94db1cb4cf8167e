"""Padding-based batching for variable-size samples (docs/batching.md).

Samples of different sizes cannot be stacked, so a DataLoader either runs at batch size 1 or
returns a list that the step loops over, one sample at a time: a GPU then sees one tiny batch
after another. This module batches them instead::

    from gpuopt.batching import LengthBucketSampler, PadCollate, masked_loss, sample_lengths

    sampler = LengthBucketSampler(sample_lengths(dataset), batch_size=32, seed=0)
    loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=PadCollate(multiple_of=8))
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:                       # x, y: Padded(data, mask, lengths)
            out = model(x.data)
            loss = masked_loss(F.cross_entropy, out, y)   # only where y.mask is set

* :class:`PadCollate` / :func:`pad_collate` — pads N-dimensional samples to the largest in the
  batch (or to a multiple of k, or to fixed bucket sizes for static shapes) and returns
  :class:`Padded` ``(data, mask, lengths)``; a sample it cannot pad raises
  :class:`PaddingError` naming the field and the two shapes.
* :class:`LengthBucketSampler` — a batch sampler that groups samples of similar length (shuffled
  within and across buckets, seeded per epoch with :meth:`~LengthBucketSampler.set_epoch`,
  sharded over ``num_replicas`` ranks).
* :func:`masked_loss`, :func:`masked_sum`, :func:`masked_mean` — a loss applied only where the
  mask is set, reduced per sample as the loss function reduces one sample.
"""

from __future__ import annotations

from gpuopt.batching.collate import PadCollate, Padded, PaddingError, pad_collate
from gpuopt.batching.losses import masked_loss, masked_mean, masked_sum
from gpuopt.batching.sampler import LengthBucketSampler, padding_waste, sample_lengths

__all__ = [
    "LengthBucketSampler",
    "PadCollate",
    "Padded",
    "PaddingError",
    "masked_loss",
    "masked_mean",
    "masked_sum",
    "pad_collate",
    "padding_waste",
    "sample_lengths",
]
