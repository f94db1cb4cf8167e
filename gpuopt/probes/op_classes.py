"""What each tensor op means for the GPU: a copy, a host sync, an indexing op, a view.

Two layers are classified. Aten ops (``torch.ops.aten.*``, seen by the dispatch mode) say what
really happens: ``_local_scalar_dense`` reads a device value back, ``nonzero`` needs the device to
finish before the host knows the output size, ``_to_copy``/``copy_`` between devices move bytes.
The Python API (seen by the ``__torch_function__`` mode) says what the user wrote: ``.item()``,
``bool(t)``, ``.cpu()``, ``x[i]``. On a CPU-only run several of those never reach the dispatcher
(``.cpu()`` of a CPU tensor is a no-op), so the API layer is the only witness there.
"""

from __future__ import annotations

from typing import Any

from gpuopt import torch_compat

# Op classes (bit flags: an op can be both indexing and data-dependent, e.g. ``x[mask]``).
SKIP = 1  # internal queries (``prim.device``): not counted at all
COPY = 2  # may move bytes between devices
SCALAR_SYNC = 4  # reads a value back to the host
DATA_DEP = 8  # output size depends on the data: the host must wait for the device
INDEXING = 16  # small indexing ops a Python loop typically issues per element
VIEW = 32  # no kernel: a view of existing memory
BOOL_INDEX = 64  # data-dependent only when an index is a boolean mask (``index``, ``index_put``)

_COPY_OPS = ("_to_copy", "copy_", "_copy_from", "_copy_from_and_resize")
_SCALAR_OPS = ("_local_scalar_dense", "equal")
_DATA_DEP_OPS = (
    "nonzero",
    "masked_select",
    "_unique2",
    "unique_dim",
    "unique_consecutive",
    "_unique",
    "argwhere",
    "repeat_interleave",
)
_BOOL_INDEX_OPS = ("index", "index_put", "index_put_", "_index_put_impl_")
_INDEXING_OPS = (
    "select",
    "slice",
    "index",
    "index_put",
    "index_put_",
    "_index_put_impl_",
    "copy_",
    "fill_",
    "unbind",
    "narrow",
    "lift_fresh",
    "as_strided",
)


def classify_op(func: Any) -> int:
    """Flags for an aten ``OpOverload`` (computed once per op and cached by the recorder)."""
    namespace = getattr(func, "namespace", "aten")
    if namespace == "prim":
        return SKIP
    name, overload = torch_compat.op_and_overload(func)
    flags = 0
    if name in _COPY_OPS:
        flags |= COPY
    if name in _SCALAR_OPS:
        flags |= SCALAR_SYNC
    if name in _DATA_DEP_OPS and not (name == "repeat_interleave" and overload != "Tensor"):
        flags |= DATA_DEP
    if name in _BOOL_INDEX_OPS:
        flags |= BOOL_INDEX
    if name in _INDEXING_OPS:
        flags |= INDEXING
    if getattr(func, "is_view", False):
        flags |= VIEW
    return flags


def has_bool_index(args: tuple[Any, ...]) -> bool:
    """Whether ``aten.index``/``index_put`` got a boolean/uint8 mask (a data-dependent size)."""
    import torch

    indices = args[1] if len(args) > 1 else None
    if not isinstance(indices, (list, tuple)):
        return False
    for ix in indices:
        if isinstance(ix, torch.Tensor) and ix.dtype in (torch.bool, torch.uint8):
            return True
    return False


def sync_api_kinds() -> dict[Any, str]:
    """Python tensor APIs that read device data back to the host, and the sync kind each is."""
    import torch

    T = torch.Tensor
    table: dict[Any, str] = {
        T.item: "item",
        T.tolist: "tolist",
        T.__bool__: "bool",
        T.__int__: "int",
        T.__float__: "float",
        T.__index__: "int",
        T.cpu: "cpu",
        T.numpy: "numpy",
        T.__format__: "print",
        T.__repr__: "print",
        T.nonzero: "nonzero",
        torch.nonzero: "nonzero",
        torch.argwhere: "nonzero",
        T.masked_select: "nonzero",
        torch.masked_select: "nonzero",
        torch.equal: "item",
        torch.allclose: "item",
        T.allclose: "item",
    }
    return table


# Sync kinds whose API is a no-op (or does not dispatch) for CPU tensors: on a CPU-only run the
# API layer records them; kinds absent here reach the dispatcher on CPU too.
API_ONLY_ON_CPU = frozenset({"cpu", "tolist", "print"})
# Kinds a device-to-host copy inherits from the API that caused it (else "blocking_copy").
COPY_SYNC_KINDS = frozenset({"cpu", "numpy", "tolist", "print"})


def metadata_apis() -> frozenset[Any]:
    """Tensor methods that only read metadata: passed through without recording (cheap path)."""
    import torch

    T = torch.Tensor
    names = (
        "dim",
        "size",
        "numel",
        "stride",
        "is_contiguous",
        "element_size",
        "data_ptr",
        "__len__",
        "is_floating_point",
        "is_complex",
        "nelement",
        "ndimension",
        "get_device",
        "storage_offset",
        "is_pinned",
        "__hash__",
        "untyped_storage",
        "is_shared",
        "type",
        "has_names",
    )
    return frozenset(getattr(T, n) for n in names if hasattr(T, n))
