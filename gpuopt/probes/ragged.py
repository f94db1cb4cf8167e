"""Shapes of the batches a DataLoader yields: how ragged the input is, and what padding wastes.

Variable-size input starves a GPU three ways: every new shape defeats CUDA graphs, cuDNN autotuning
and ``torch.compile`` caches; batch size 1 with variable-size samples leaves most of the device
idle; and a Python loop over the samples of a batch issues per-sample ops. Where padding is
already used, the padded positions are work thrown away. This module measures the first, second
and fourth from the batches themselves; the third is joined with the recorder's loops by the
``ragged-batches`` rule.

Shapes are read for every batch (a few attribute reads, microseconds); the padding scan runs
only on batches inside the detailed window, and only on CPU tensors (it must never sync a GPU).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpuopt.model.profile import Ragged, RaggedLoader, ShapeCount

_MAX_LEAVES = 32
_MAX_DEPTH = 4
_MAX_DISTINCT = 256
_MASK_WORDS = ("mask",)


def _leaves(
    batch: Any, path: str = "batch", depth: int = 0, out: list[tuple[str, Any]] | None = None
) -> list[tuple[str, Any]]:
    """``(path, leaf)`` pairs of tensors/arrays (and lists of them) in a batch structure."""
    if out is None:
        out = []
    if len(out) >= _MAX_LEAVES or depth > _MAX_DEPTH:
        return out
    if hasattr(batch, "shape") and hasattr(batch, "dtype"):
        out.append((path, batch))
    elif isinstance(batch, dict):
        for k in list(batch)[:_MAX_LEAVES]:
            _leaves(batch[k], f"{path}.{k}", depth + 1, out)
    elif isinstance(batch, (list, tuple)) and batch:
        if _variable_samples(batch):  # a collate that returns the samples as they are
            out.append((path, list(batch)))
            return out
        for i, x in enumerate(batch[:_MAX_LEAVES]):
            _leaves(x, f"{path}[{i}]", depth + 1, out)
    return out


def _variable_samples(batch: list[Any] | tuple[Any, ...]) -> bool:
    """A list of samples of different sizes, as opposed to a batch structure such as
    ``[inputs, targets]``: the parts of a structure share the batch (leading) dimension."""
    if not isinstance(batch, list) or len(batch) < 2:
        return False
    items = batch[:_MAX_LEAVES]
    if not all(hasattr(x, "shape") for x in items):
        return False
    shapes = [tuple(x.shape) for x in items]
    if len({len(s) for s in shapes}) != 1 or not shapes[0]:
        return False
    return len({s[0] for s in shapes}) > 1


# (leaves, signature, batch size, list leaves) of one batch: read once per batch, shared by the
# trackers that count it
BatchShapes = tuple[list[tuple[str, Any]], tuple[Any, ...], "int | None", int]


def batch_shapes(batch: Any) -> BatchShapes:
    """A batch's tensor leaves, its shape signature (``(path, shape)`` per leaf; ``(path,
    "list", sample shapes)`` for a list of samples), its batch size (the first leaf's leading
    dimension) and how many of its leaves are lists of samples. A few microseconds."""
    fast = _flat_batch_shapes(batch)
    return fast if fast is not None else walked_batch_shapes(batch)


def walked_batch_shapes(batch: Any) -> BatchShapes:
    """:func:`batch_shapes` by walking any batch structure (nested dicts, lists, tuples)."""
    leaves = _leaves(batch)
    sig: list[Any] = []
    batch_size: int | None = None
    lists = 0
    for path, leaf in leaves:
        if isinstance(leaf, list):
            lists += 1
            sig.append((path, "list", tuple(tuple(x.shape) for x in leaf)))
            if batch_size is None:
                batch_size = len(leaf)
            continue
        shape = tuple(leaf.shape)  # torch.Size and numpy shapes hold ints
        sig.append((path, shape))
        if batch_size is None and shape:
            batch_size = int(shape[0])
    return leaves, tuple(sig), batch_size, lists


_PATHS = tuple(f"batch[{i}]" for i in range(_MAX_LEAVES))


def _flat_batch_shapes(batch: Any) -> BatchShapes | None:
    """:func:`batch_shapes` of the common batch, a list or tuple of tensors (``(x, y)``), read in
    one pass (plain loops: this runs on every batch); None for any other batch (the general walk
    reads it)."""
    if not isinstance(batch, (list, tuple)) or not 0 < len(batch) <= _MAX_LEAVES:
        return None
    sig: list[tuple[str, tuple[int, ...]]] = []
    batch_size: int | None = None
    for path, x in zip(_PATHS, batch, strict=False):
        found = getattr(x, "shape", None)
        if found is None or not hasattr(x, "dtype"):
            return None
        shape = tuple(found)  # torch.Size and numpy shapes hold ints
        sig.append((path, shape))
        if batch_size is None and shape:
            batch_size = int(shape[0])
    if isinstance(batch, list) and len(sig) > 1 and sig[0][1]:
        first = sig[0][1]
        same_rank, leading_differs = True, False
        for _, shape in sig:
            if len(shape) != len(first):
                same_rank = False
                break
            leading_differs = leading_differs or shape[0] != first[0]
        if same_rank and leading_differs:
            return None  # a list of variable-size samples: the general walk says so
    return list(zip(_PATHS, batch, strict=False)), tuple(sig), batch_size, 0


class BatchShapeTracker:
    """Accumulates shape statistics over all batches and padding statistics over a window."""

    def __init__(self) -> None:
        self.batches = 0
        self.steps: set[int] = set()
        self.signatures: Counter[tuple[Any, ...]] = Counter()
        self.batch_sizes: Counter[int] = Counter()
        self.dim_sizes: dict[tuple[str, int], set[int]] = {}
        self.list_batches = 0  # batches holding a list of variable-size samples
        self.padding: dict[str, list[float]] = {}  # leaf path → [padded elements, total elements]
        self.padded_batches = 0

    def observe(
        self, batch: Any, step: int, detailed: bool, shapes: BatchShapes | None = None
    ) -> None:
        """Count one batch (``shapes``: :func:`batch_shapes` of it, when the caller has them)."""
        leaves, key, batch_size, lists = shapes if shapes is not None else batch_shapes(batch)
        if not leaves:
            return
        self.batches += 1
        self.steps.add(step)
        self.list_batches += lists
        if key in self.signatures:  # a shape seen before: its sizes are counted already
            self.signatures[key] += 1
        else:
            self._new_shape(key)
        if batch_size is not None:
            self.batch_sizes[batch_size] += 1
        if detailed:
            self._scan_padding(leaves)

    def _new_shape(self, key: tuple[Any, ...]) -> None:
        for item in key:
            if len(item) == 3:  # a list of samples
                continue
            path, shape = item
            for d, size in enumerate(shape):
                sizes = self.dim_sizes.setdefault((path, d), set())
                if len(sizes) < _MAX_DISTINCT:
                    sizes.add(size)
        if len(self.signatures) < _MAX_DISTINCT:
            self.signatures[key] += 1

    def _scan_padding(self, leaves: list[tuple[str, Any]]) -> None:
        """Padded elements per leaf: a ``*mask*`` entry's zeros, or trailing zeros per row of an
        integer (token id) matrix whose rows have different real lengths."""
        import torch

        found = False
        for path, leaf in leaves:
            if not isinstance(leaf, torch.Tensor) or leaf.device.type != "cpu" or leaf.numel() == 0:
                continue
            name = path.lower()
            if any(w in name for w in _MASK_WORDS) and leaf.dtype in (
                torch.bool,
                torch.uint8,
                torch.int32,
                torch.int64,
            ):
                total = leaf.numel()
                padded = total - int((leaf != 0).sum())
            elif (
                leaf.dim() == 2
                and not leaf.dtype.is_floating_point
                and leaf.dtype != torch.bool
                and leaf.shape[1] > 1
            ):
                rows, width = leaf.shape
                nonzero = leaf != 0
                positions = torch.arange(1, width + 1).expand(rows, width)
                lengths = torch.where(nonzero, positions, torch.zeros_like(positions)).amax(dim=1)
                if int(lengths.min()) == int(lengths.max()):
                    continue  # all rows equally long: fixed-size data, not padding
                total = rows * width
                padded = total - int(lengths.sum())
            else:
                continue
            acc = self.padding.setdefault(path, [0.0, 0.0])
            acc[0] += padded
            acc[1] += total
            found = True
        if found:
            self.padded_batches += 1

    def summary(self) -> Ragged:
        """The profile's ``ragged`` record (the shapes part; the recorder adds the rest)."""
        variable = sorted(
            f"{path} dim {d}"
            for (path, d), sizes in self.dim_sizes.items()
            if len(sizes) > 1 and d > 0
        )
        variable_batch_dim = any(len(s) > 1 for (_, d), s in self.dim_sizes.items() if d == 0)
        top = [
            ShapeCount(shapes=_describe(sig), batches=n)
            for sig, n in self.signatures.most_common(5)
        ]
        sizes = sorted(self.batch_sizes)
        common_size = self.batch_sizes.most_common(1)[0][0] if self.batch_sizes else None
        pad_path, pad = None, None
        for path, (padded, total) in self.padding.items():
            frac = padded / total if total else 0.0
            if pad is None or frac > pad:
                pad_path, pad = path, frac
        return Ragged(
            batches=self.batches,
            steps_observed=len(self.steps),
            distinct_shapes=len(self.signatures),
            new_shape_share=round(len(self.signatures) / self.batches, 4) if self.batches else None,
            batch_size=common_size,
            batch_sizes=sizes[:16],
            variable_dims=variable[:16],
            variable_batch_size=variable_batch_dim,
            list_batches=self.list_batches,
            batch_size_1_variable=bool(sizes == [1] and (variable or self.list_batches)),
            pad_fraction=round(pad, 4) if pad is not None else None,
            pad_tensor=pad_path,
            padded_batches_scanned=self.padded_batches,
            top_shapes=top,
            samples=sum(size * n for size, n in self.batch_sizes.items()),
        )


def _describe(sig: tuple[Any, ...]) -> str:
    parts = []
    for item in sig:
        if len(item) == 3:
            parts.append(f"{item[0]}: list of {len(item[2])} samples")
        else:
            parts.append(f"{item[0]}: {'x'.join(str(s) for s in item[1]) or 'scalar'}")
    return ", ".join(parts)


class LoaderShapes:
    """Batch shapes per DataLoader, each with its role: a loader whose batches were all fetched
    with autograd off (``torch.no_grad``, ``inference_mode``: an evaluation loop) is "eval"."""

    def __init__(self) -> None:
        self.trackers: dict[int, BatchShapeTracker] = {}
        self.sites: dict[int, str | None] = {}
        self.training: dict[int, int] = {}  # batches fetched with autograd on

    def observe(
        self, origin: Any, batch: Any, step: int, shapes: BatchShapes | None = None
    ) -> None:
        key = origin.loader
        tracker = self.trackers.get(key)
        if tracker is None:
            tracker = self.trackers[key] = BatchShapeTracker()
            self.sites[key] = origin.site
            self.training[key] = 0
        tracker.observe(batch, step, detailed=False, shapes=shapes)
        self.training[key] += bool(origin.training)

    def summary(self) -> list[RaggedLoader]:
        out = []
        for key, t in self.trackers.items():
            out.append(
                RaggedLoader(
                    site=self.sites[key],
                    role="train" if self.training[key] else "eval",
                    batches=t.batches,
                    batch_sizes=sorted(t.batch_sizes),
                    distinct_shapes=len(t.signatures),
                )
            )
        return out
