"""gpuopt.batching: the pad collate (N-dimensional samples, multiples, buckets, structures, clear
errors), the length-bucketing sampler (shuffled within and across buckets, per epoch, sharded
over ranks) and the masked losses (equal to the per-sample losses and their gradients)."""

from __future__ import annotations

import random
from collections import namedtuple

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from gpuopt.batching import (
    LengthBucketSampler,
    PadCollate,
    Padded,
    PaddingError,
    masked_loss,
    masked_mean,
    pad_collate,
    padding_waste,
    sample_lengths,
)

g = torch.Generator().manual_seed(0)


def seqs(*lengths: int, dim: int = 3) -> list[torch.Tensor]:
    return [torch.randn(n, dim, generator=g) for n in lengths]


# -- collate -----------------------------------------------------------------------------------
def test_pads_to_the_longest_with_mask_and_lengths() -> None:
    xs = [torch.arange(1, n + 1) for n in (3, 1, 4)]
    p = pad_collate(xs)
    assert isinstance(p, Padded)
    assert p.data.tolist() == [[1, 2, 3, 0], [1, 0, 0, 0], [1, 2, 3, 4]]
    assert p.mask.tolist() == [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]]
    assert p.lengths.tolist() == [3, 1, 4] and p.lengths.dtype == torch.int64
    assert p.padding_fraction == pytest.approx(4 / 12)


def test_n_dimensional_samples_multiple_of_and_feature_dims() -> None:
    images = [torch.ones(3, h, w) for h, w in ((5, 7), (6, 2))]
    p = PadCollate(feature_dims=0, multiple_of=4)(images)
    assert p.data.shape == (2, 4, 8, 8) and p.mask.shape == (2, 4, 8, 8)
    assert p.lengths.tolist() == [[3, 5, 7], [3, 6, 2]]
    assert int(p.mask[1].sum()) == 3 * 6 * 2 and float(p.data.sum()) == 3 * (35 + 12)
    q = PadCollate(feature_dims=1, pad_value=-1.0)(seqs(2, 5))
    assert q.data.shape == (2, 5, 3) and q.mask.shape == (2, 5)
    assert bool((q.data[0, 2:] == -1).all())


def test_fixed_buckets_give_static_shapes() -> None:
    collate = PadCollate(buckets=[8, 16, 32], feature_dims=1)
    assert collate(seqs(3, 5)).data.shape == (2, 8, 3)
    assert collate(seqs(9, 2)).data.shape == (2, 16, 3)
    with pytest.raises(PaddingError, match=r"sample 1 has shape \(40, 3\), longer than the larg"):
        collate(seqs(3, 40))


def test_structures_keep_their_shape() -> None:
    Pair = namedtuple("Pair", "x label")
    batch = pad_collate([Pair(torch.ones(2), 1), Pair(torch.ones(5), 0)])
    assert isinstance(batch, Pair) and isinstance(batch.x, Padded)
    assert batch.label.tolist() == [1, 0]
    d = pad_collate(
        [
            {"ids": torch.ones(3, dtype=torch.long), "name": "a"},
            {"ids": torch.ones(1, dtype=torch.long), "name": "b"},
        ],
        rules={"name": list},
    )
    assert d["name"] == ["a", "b"] and d["ids"].data.shape == (2, 3)
    t = pad_collate([(torch.ones(2), torch.tensor(3.0)), (torch.ones(4), torch.tensor(1.0))])
    assert isinstance(t, tuple) and t[1].tolist() == [3.0, 1.0]


@pytest.mark.parametrize(
    ("samples", "message"),
    [
        (
            [{"x": torch.ones(3)}, {"x": torch.ones(3, 2)}],
            "cannot pad field sample['x']: sample 1 has shape (3, 2) and sample 0 has shape "
            "(3,): different ranks",
        ),
        (
            [(torch.ones(3), 0), (torch.ones(2, dtype=torch.int64), 1)],
            "cannot pad field sample[0]: sample 1 has shape (2,) and sample 0 has shape (3,): "
            "different dtypes (torch.int64 and torch.float32)",
        ),
        (
            [{"x": torch.ones(2), "meta": object()}, {"x": torch.ones(2), "meta": object()}],
            "cannot collate field sample['meta']: sample 0 is a object, which gpuopt cannot "
            "pad; give it a rule, e.g. PadCollate(rules={'meta': list})",
        ),
        (
            [torch.ones(2), "text"],
            "cannot collate the samples: sample 1 is a str, sample 0 is a tensor",
        ),
        (
            [torch.ones(2, 3), torch.ones(4, 5)],
            "the last 1 (feature) dimensions differ",
        ),
    ],
    ids=["ranks", "dtypes", "no-rule", "mixed", "features"],
)
def test_what_cannot_be_padded_names_the_field_and_shapes(samples: list, message: str) -> None:
    collate = PadCollate(feature_dims=1) if message.startswith("the last") else PadCollate()
    with pytest.raises(PaddingError) as err:
        collate(samples)
    assert message in str(err.value)


def test_padded_moves_with_its_mask_and_works_in_a_dataloader() -> None:
    p = pad_collate(seqs(2, 3)).to(torch.float64)
    assert p.data.dtype == torch.float64 and p.mask.dtype == torch.bool
    data = [(torch.ones(n), torch.zeros(n)) for n in (3, 1, 2, 5)]
    loader = DataLoader(data, batch_size=2, collate_fn=pad_collate)  # type: ignore[arg-type]
    shapes = [(x.data.shape, y.mask.shape) for x, y in loader]
    assert shapes == [((2, 3), (2, 3)), ((2, 5), (2, 5))]


# -- sampler -----------------------------------------------------------------------------------
def _lengths(n: int = 2000, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [min(int(rng.lognormvariate(3.0, 1.0)) + 1, 2000) for _ in range(n)]


def test_buckets_cover_every_sample_once_and_cut_padding() -> None:
    lengths = _lengths()
    sampler = LengthBucketSampler(lengths, 32, seed=0)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert len(batches) == len(sampler) and all(len(b) <= 32 for b in batches)
    shuffled = [list(range(i, min(i + 32, len(lengths)))) for i in range(0, len(lengths), 32)]
    assert padding_waste(lengths, batches) < 0.10 < padding_waste(lengths, shuffled)


def test_shuffled_within_and_across_buckets_per_epoch_and_repeatable() -> None:
    lengths = _lengths(500)
    sampler = LengthBucketSampler(lengths, 16, seed=3)
    first = list(sampler)
    assert list(sampler) == first  # same epoch, same order
    sampler.set_epoch(1)
    second = list(sampler)
    assert second != first and sorted(map(sorted, second)) != sorted(map(sorted, first))
    plain = LengthBucketSampler(lengths, 16, shuffle=False)
    bucket = {i: k for k, members in enumerate(plain.buckets) for i in members}
    kinds = [{bucket[i] for i in b} for b in plain]
    assert all(len(k) == 1 for k in kinds)  # one bucket a batch
    assert [min(k) for k in kinds] == sorted(min(k) for k in kinds)  # buckets in order
    shuffled = [{bucket[i] for i in b} for b in first]
    assert all(len(k) == 1 for k in shuffled) and shuffled != kinds  # across buckets too
    torch.manual_seed(0)
    a = list(LengthBucketSampler(lengths, 16))  # seed None: from torch's generator
    torch.manual_seed(0)
    assert list(LengthBucketSampler(lengths, 16)) == a


@pytest.mark.parametrize("drop_last", [False, True])
def test_distributed_shards_are_disjoint_and_equally_long(drop_last: bool) -> None:
    lengths = _lengths(1001)
    shards = [
        list(LengthBucketSampler(lengths, 8, seed=1, num_replicas=3, rank=r, drop_last=drop_last))
        for r in range(3)
    ]
    assert len({len(s) for s in shards}) == 1
    expected = len(LengthBucketSampler(lengths, 8, num_replicas=3, rank=0, drop_last=drop_last))
    assert all(len(s) == expected for s in shards)
    seen = [i for s in shards for b in s for i in b]
    if drop_last:
        assert len(seen) == len(set(seen)) and all(len(b) == 8 for s in shards for b in s)
    else:
        assert set(seen) == set(range(1001))  # padded with batches from the start


def test_sampler_bad_arguments() -> None:
    with pytest.raises(ValueError, match="rank 3 is not in"):
        LengthBucketSampler([1, 2], 2, num_replicas=2, rank=3)
    with pytest.raises(ValueError, match="batch_size"):
        LengthBucketSampler([1, 2], 0)


def test_sample_lengths_reads_the_dataset() -> None:
    ds = [(torch.ones(n, 2), 0) for n in (3, 7)]
    assert sample_lengths(ds) == [3, 7]
    assert sample_lengths(TensorDataset(torch.ones(4, 5)), dim=0) == [5, 5, 5, 5]


# -- masked losses -----------------------------------------------------------------------------
def _grads(loss: torch.Tensor, params: list[torch.Tensor]) -> list[torch.Tensor]:
    return list(torch.autograd.grad(loss, params))


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_masked_loss_equals_the_per_sample_losses_and_gradients(reduction: str) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    xs, ys = seqs(5, 1, 9, 4), seqs(5, 1, 9, 4, dim=2)
    params = list(model.parameters())
    loop = sum(F.mse_loss(model(x), y, reduction=reduction) for x, y in zip(xs, ys, strict=True))
    x, y = pad_collate(xs), pad_collate(ys)
    batched = masked_loss(F.mse_loss, model(x.data), y, reduction=reduction, batch_reduction="sum")
    assert torch.allclose(batched, loop, rtol=1e-5)
    for a, b in zip(_grads(loop, params), _grads(batched, params), strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def test_class_losses_with_classes_last_and_ignore_index() -> None:
    logits = seqs(4, 2, 6, dim=5)
    targets = [torch.randint(0, 5, (n,), generator=g) for n in (4, 2, 6)]
    targets[2][1] = -100
    loop = sum(F.cross_entropy(a, b) for a, b in zip(logits, targets, strict=True)) / 3
    got = masked_loss(F.cross_entropy, pad_collate(logits).data, pad_collate(targets))
    assert torch.allclose(got, loop, rtol=1e-5)
    module = torch.nn.CrossEntropyLoss(reduction="sum")
    loop_sum = sum(module(a, b) for a, b in zip(logits, targets, strict=True))
    got_sum = masked_loss(module, pad_collate(logits), pad_collate(targets), batch_reduction="sum")
    assert torch.allclose(got_sum, loop_sum, rtol=1e-5) and module.reduction == "sum"


def test_padded_positions_never_reach_the_loss() -> None:
    y = pad_collate([torch.ones(2), torch.ones(3)])
    out = torch.ones(2, 3)
    out[0, 2] = float("inf")  # a padded position
    assert masked_loss(F.mse_loss, out, y).item() == 0.0
    assert masked_mean(torch.tensor([[1.0, 5.0]]), torch.tensor([[True, False]])).item() == 1.0
    with pytest.raises(ValueError, match="reduction='none'"):
        masked_loss(F.mse_loss, out, y, reduction="none")
