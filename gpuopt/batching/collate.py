"""A collate function that pads variable-size samples into one batch, with a mask and lengths.

Each field of the samples is collated on its own (a sample may be a tensor, a tuple or list, a
named tuple or a mapping of fields, nested):

* tensors (and numpy arrays) of rank ≥ 1 are padded to the largest size in the batch along
  every dimension but the last ``feature_dims`` ones (which must agree), optionally rounded up
  to a multiple of ``multiple_of`` or to the smallest of ``buckets`` that fits (a few fixed
  sizes: static shapes for CUDA graphs, cuDNN autotuning and compile caches), and returned as
  :class:`Padded` ``(data, mask, lengths)``;
* rank-0 tensors and Python numbers are stacked into one tensor;
* ``None`` in every sample stays ``None``;
* anything else needs a rule (``rules={"name": list}``), else :class:`PaddingError`.

A field that cannot be padded (different ranks, dtypes or devices, feature dimensions that
differ, a sample longer than the largest bucket, a non-tensor without a rule) raises
:class:`PaddingError` naming the field and the two samples' shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

FieldKey = str | int
Rule = Callable[[list[Any]], Any]


class PaddingError(ValueError):
    """Samples that cannot be padded into one batch; the message names the field and shapes."""


class Padded(NamedTuple):
    """One padded field of a batch.

    ``data``: ``(B, *padded_shape)``; ``mask``: bool, ``(B, *padded_shape[:-feature_dims])``,
    True at a sample's real positions; ``lengths``: int64, each sample's size along its first
    dimension ``(B,)`` when one dimension is padded, else its sizes along every padded dimension
    ``(B, k)``. ``to``/``cuda``/``cpu``/``pin_memory`` move all three (``to(dtype)`` changes
    only ``data``).
    """

    data: torch.Tensor
    mask: torch.Tensor
    lengths: torch.Tensor

    def to(self, *args: Any, **kwargs: Any) -> Padded:
        data = self.data.to(*args, **kwargs)
        blocking = bool(kwargs.get("non_blocking", False))
        return Padded(
            data,
            self.mask.to(data.device, non_blocking=blocking),
            self.lengths.to(data.device, non_blocking=blocking),
        )

    def cuda(self, *args: Any, **kwargs: Any) -> Padded:
        data = self.data.cuda(*args, **kwargs)
        return Padded(data, self.mask.to(data.device), self.lengths.to(data.device))

    def cpu(self) -> Padded:
        return Padded(self.data.cpu(), self.mask.cpu(), self.lengths.cpu())

    def pin_memory(self) -> Padded:
        return Padded(self.data.pin_memory(), self.mask.pin_memory(), self.lengths.pin_memory())

    @property
    def padding_fraction(self) -> float:
        """The share of the mask's positions that are padding."""
        total = self.mask.numel()
        return 1.0 - int(self.mask.sum()) / total if total else 0.0


def _field(path: str) -> str:
    return "the samples" if path == "sample" else f"field {path}"


def _shape(t: Any) -> str:
    dims = tuple(int(s) for s in t.shape)
    return str(dims)


class PadCollate:
    """``collate_fn`` that pads (picklable: DataLoader workers get a copy).

    ``pad_value`` and ``feature_dims`` take one value for every field or a mapping from a
    top-level field (a mapping's key, a tuple's index) to its value; ``rules`` maps a field to a
    function collating its list of values (``list`` keeps strings as a list).
    """

    def __init__(
        self,
        *,
        pad_value: float | Mapping[FieldKey, float] = 0,
        multiple_of: int | None = None,
        buckets: Sequence[int] | None = None,
        feature_dims: int | Mapping[FieldKey, int] = 0,
        rules: Mapping[FieldKey, Rule] | None = None,
    ) -> None:
        if multiple_of is not None and multiple_of < 1:
            raise ValueError(f"multiple_of must be at least 1, got {multiple_of}")
        if buckets is not None:
            if not buckets or any(int(b) < 1 for b in buckets):
                raise ValueError(f"buckets must be positive sizes, got {list(buckets)}")
            buckets = sorted({int(b) for b in buckets})
        self.pad_value = pad_value
        self.multiple_of = multiple_of
        self.buckets = list(buckets) if buckets is not None else None
        self.feature_dims = feature_dims
        self.rules = dict(rules or {})

    def __call__(self, samples: Sequence[Any]) -> Any:
        values = list(samples)
        if not values:
            raise PaddingError("an empty batch: nothing to collate")
        return self._collate(values, "sample", None)

    # -- structure -----------------------------------------------------------------------------
    def _collate(self, values: list[Any], path: str, key: FieldKey | None) -> Any:
        rule = self.rules.get(path, self.rules.get(key) if key is not None else None)
        if rule is not None:
            return rule(values)
        first = values[0]
        if isinstance(first, (torch.Tensor, np.ndarray)):
            return self._tensors(values, path, key)
        if isinstance(first, Mapping):
            return self._mapping(values, path, key)
        if isinstance(first, (tuple, list)):
            return self._sequence(values, path, key)
        if isinstance(first, (bool, int, float)):
            self._same_kind(values, path, (bool, int, float), "a number")
            return torch.tensor(values)
        if first is None and all(v is None for v in values):
            return None
        what = type(first).__name__
        name = key if key is not None else "name"
        raise PaddingError(
            f"cannot collate {_field(path)}: sample 0 is a {what}, which gpuopt cannot pad; give "
            f"it a rule, e.g. PadCollate(rules={{{name!r}: list}})"
        )

    def _same_kind(self, values: list[Any], path: str, kinds: Any, what: str) -> None:
        for i, v in enumerate(values):
            if not isinstance(v, kinds):
                raise PaddingError(
                    f"cannot collate {_field(path)}: sample {i} is a {type(v).__name__}, "
                    f"sample 0 is {what}"
                )

    def _mapping(self, values: list[Any], path: str, key: FieldKey | None) -> dict[Any, Any]:
        self._same_kind(values, path, Mapping, "a mapping")
        keys = list(values[0])
        for i, v in enumerate(values):
            if list(v) != keys:
                raise PaddingError(
                    f"cannot collate {_field(path)}: sample {i} has keys {sorted(map(str, v))}, "
                    f"sample 0 has {sorted(map(str, keys))}"
                )
        return {
            k: self._collate([v[k] for v in values], f"{path}[{k!r}]", k if key is None else key)
            for k in keys
        }

    def _sequence(self, values: list[Any], path: str, key: FieldKey | None) -> Any:
        first = values[0]
        self._same_kind(values, path, (tuple, list), f"a {type(first).__name__}")
        for i, v in enumerate(values):
            if len(v) != len(first):
                raise PaddingError(
                    f"cannot collate {_field(path)}: sample {i} has {len(v)} fields, "
                    f"sample 0 has {len(first)}"
                )
        fields = [
            self._collate([v[j] for v in values], f"{path}[{j}]", j if key is None else key)
            for j in range(len(first))
        ]
        if isinstance(first, tuple) and hasattr(first, "_fields"):
            return type(first)(*fields)
        return tuple(fields) if isinstance(first, tuple) else fields

    # -- tensors -------------------------------------------------------------------------------
    def _option(self, option: Any, key: FieldKey | None, default: Any) -> Any:
        if isinstance(option, Mapping):
            return option.get(key, default) if key is not None else default
        return option

    def _tensors(self, values: list[Any], path: str, key: FieldKey | None) -> Any:
        self._same_kind(values, path, (torch.Tensor, np.ndarray), "a tensor")
        tensors = [v if isinstance(v, torch.Tensor) else torch.as_tensor(v) for v in values]
        first = tensors[0]
        kinds = {(t.dim(), t.dtype, t.get_device()) for t in tensors}  # get_device: -1 on CPU
        for i, t in enumerate(tensors if len(kinds) > 1 else ()):
            why = (
                "different ranks"
                if t.dim() != first.dim()
                else f"different dtypes ({t.dtype} and {first.dtype})"
                if t.dtype != first.dtype
                else f"different devices ({t.device} and {first.device})"
                if t.device != first.device
                else None
            )
            if why:
                raise PaddingError(
                    f"cannot pad {_field(path)}: sample {i} has shape {_shape(t)} and sample 0 has "
                    f"shape {_shape(first)}: {why}"
                )
        if first.dim() == 0:
            return torch.stack(tensors)
        return self._pad(tensors, path, key)

    def _pad(self, tensors: list[torch.Tensor], path: str, key: FieldKey | None) -> Padded:
        first = tensors[0]
        features = int(self._option(self.feature_dims, key, 0))
        ragged = first.dim() - features
        if features < 0 or ragged < 1:
            raise PaddingError(
                f"cannot pad {_field(path)}: feature_dims={features} leaves no dimension to pad "
                f"in samples of shape {_shape(first)}"
            )
        shapes = [tuple(t.shape) for t in tensors]
        for i, shape in enumerate(shapes):
            if shape[ragged:] != shapes[0][ragged:]:
                raise PaddingError(
                    f"cannot pad {_field(path)}: sample {i} has shape {shape} and sample 0 has "
                    f"shape {shapes[0]}: the last {features} (feature) dimensions differ"
                )
        most = [max(shape[d] for shape in shapes) for d in range(ragged)]
        target = [self._size(n, path, tensors, d) for d, n in enumerate(most)]
        pad = self._option(self.pad_value, key, 0)
        if all(shape[1:] == shapes[0][1:] for shape in shapes) and target[1:] == most[1:]:
            return _pad_first(tensors, target, ragged, pad, shapes)
        sizes = torch.tensor(shapes, dtype=torch.int64)[:, :ragged]
        batch = len(tensors)
        data = torch.full(
            (batch, *target, *first.shape[ragged:]), pad, dtype=first.dtype, device=first.device
        )
        mask = torch.zeros((batch, *target), dtype=torch.bool, device=first.device)
        for i, t in enumerate(tensors):
            region: tuple[int | slice, ...] = (i, *(slice(0, n) for n in t.shape[:ragged]))
            data[region] = t
            mask[region] = True
        return Padded(data, mask, sizes.to(first.device))

    def _size(self, need: int, path: str, tensors: list[torch.Tensor], dim: int) -> int:
        """The padded size of dimension ``dim``: the largest sample's, rounded as asked."""
        if self.buckets is not None:
            fits = [b for b in self.buckets if b >= need]
            if not fits:
                i = next(i for i, t in enumerate(tensors) if t.shape[dim] == need)
                raise PaddingError(
                    f"cannot pad {_field(path)}: sample {i} has shape {_shape(tensors[i])}, "
                    f"longer than the largest bucket ({self.buckets[-1]}) in dimension {dim}"
                )
            need = fits[0]
        if self.multiple_of is not None:
            need = -(-need // self.multiple_of) * self.multiple_of
        return need


def _pad_first(
    tensors: list[torch.Tensor],
    target: list[int],
    ragged: int,
    pad: float,
    shapes: list[tuple[int, ...]],
) -> Padded:
    """Only the first dimension differs: one ``pad_sequence`` (a single op, not one a sample)."""
    from torch.nn.utils.rnn import pad_sequence

    device = tensors[0].device
    data = pad_sequence(tensors, batch_first=True, padding_value=pad)
    if target[0] > data.shape[1]:
        extra = data.new_full((len(tensors), target[0] - data.shape[1], *data.shape[2:]), pad)
        data = torch.cat([data, extra], dim=1)
    lengths = torch.tensor([s[0] for s in shapes], dtype=torch.int64, device=device)
    mask = torch.arange(target[0], device=device).unsqueeze(0) < lengths.unsqueeze(1)
    if ragged == 1:
        return Padded(data, mask, lengths)
    view = mask.view(*mask.shape, *[1] * (ragged - 1))
    sizes = torch.tensor([s[:ragged] for s in shapes], dtype=torch.int64, device=device)
    return Padded(data, view.expand(len(tensors), *target).contiguous(), sizes)


def pad_collate(samples: Sequence[Any], **options: Any) -> Any:
    """Collate ``samples`` with :class:`PadCollate` ``(**options)``; as a DataLoader's
    ``collate_fn`` directly, or with options through ``PadCollate(...)``."""
    return PadCollate(**options)(samples)


__all__ = ["PadCollate", "Padded", "PaddingError", "pad_collate"]
