"""Where a CUDA GPU runs another kernel than the CPU, with other memory: attention and dropout
as a GPU runs them, on fake CPU tensors that model one.

``F.scaled_dot_product_attention`` picks its kernel by device. On the CPU, a training step with
dropout runs the *math* path: the (batch, heads, L, S) scores, their softmax, the dropout mask
and its output are made and kept for the backward — four tensors of batch × heads × L × S per
layer. On a CUDA GPU the same call runs a fused kernel (flash attention for fp16/bf16,
memory-efficient attention for fp32 or with a mask) that keeps the output and a
(batch, heads, L) log-sum-exp only. A replay on fake CPU tensors that models a GPU would count
the CPU's matrices (48% over the GPU's peak for a 6-layer Transformer at batch 16, measured on an
H200).

**Dropout**: on the CPU ``F.dropout`` makes a float noise tensor (4 bytes an element) that the
product keeps for the backward; on a CUDA GPU it is the fused ``native_dropout``, which keeps a
boolean mask (1 byte). A Transformer layer's three dropouts at batch 4 × 256 tokens: 54 MiB over
six layers, what a replay on the CPU counts over the same step's replay on an H200.

:func:`mode` routes the attention call to the fused op CUDA would choose,
by torch's own rules (``sdp_utils``): flash for fp16/bf16 without a mask on compute capability
8.0 or later, head size at most 256; memory-efficient for fp16/bf16/fp32 with a head size
divisible by 8 (fp32: 4); else the math path, as on the GPU. Torch's fake kernels of the fused
ops give their outputs, saved tensors and backward shapes on any device.
"""

from __future__ import annotations

from typing import Any


def cuda_backend(
    q: Any, k: Any, v: Any, attn_mask: Any, capability: tuple[int, int] | None, gqa: bool
) -> str:
    """``"flash"``, ``"efficient"`` or ``"math"``: the kernel CUDA runs for these inputs."""
    import torch

    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4 or gqa:
        return "math"
    head = int(q.shape[-1])
    if int(k.shape[-1]) != head or int(v.shape[-1]) != head:
        return "math"
    half = q.dtype in (torch.float16, torch.bfloat16)
    major = capability[0] if capability is not None else 9
    if half and attn_mask is None and major >= 8 and head <= 256:
        return "flash"
    if (half or q.dtype == torch.float32) and head % (8 if half else 4) == 0:
        return "efficient"
    return "math"


def _bias(attn_mask: Any, q: Any, k: Any) -> Any:
    """The mask as the efficient kernel takes it: a float bias (a boolean mask becomes one, as
    torch converts it), broadcast to (batch, heads, L, S)."""
    import torch

    if attn_mask is None:
        return None
    if attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros_like(attn_mask, dtype=q.dtype).masked_fill(
            attn_mask.logical_not(), float("-inf")
        )
    shape = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    return attn_mask.expand(shape)


def sdpa(
    capability: tuple[int, int] | None, args: tuple[Any, ...], kw: dict[str, Any]
) -> tuple[str, Any]:
    """``(kernel, output)`` of ``F.scaled_dot_product_attention(*args, **kw)`` through the op
    CUDA would run; the output None where that is the math path (the caller runs the call as
    it is)."""
    import torch

    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")
    given = dict(zip(names, args, strict=False)) | kw
    q, k, v = given["query"], given["key"], given["value"]
    mask = given.get("attn_mask")
    p, causal = float(given.get("dropout_p", 0.0)), bool(given.get("is_causal", False))
    scale = given.get("scale")
    backend = cuda_backend(q, k, v, mask, capability, bool(given.get("enable_gqa", False)))
    aten = torch.ops.aten
    if backend == "flash":
        out = aten._scaled_dot_product_flash_attention(q, k, v, p, causal, False, scale=scale)
        return backend, out[0]
    if backend == "efficient":
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
        bias = _bias(mask, q, k)
        out = aten._scaled_dot_product_efficient_attention(
            q, k, v, bias, grad, p, causal, scale=scale
        )
        return backend, out[0]
    return backend, None


def dropout(orig: Any, routed: dict[str, int]) -> Any:
    """``F.dropout`` as CUDA runs it: ``native_dropout`` in training (a boolean mask kept)."""
    import torch

    def cuda_dropout(
        input: Any, p: float = 0.5, training: bool = True, inplace: bool = False
    ) -> Any:
        if not training or inplace or not 0.0 < p < 1.0 or input.numel() == 0:
            return orig(input, p, training, inplace)
        routed["dropout"] = routed.get("dropout", 0) + 1
        return torch.ops.aten.native_dropout(input, p, True)[0]

    return cuda_dropout


class CudaPaths:
    """While entered, ``torch.nn.functional.scaled_dot_product_attention`` and
    ``torch.nn.functional.dropout`` run as CUDA would (see the module doc): the names are
    rebound in ``torch.nn.functional`` (its own ``multi_head_attention_forward``, ``nn.Dropout``
    and a script's ``F.…`` look them up there at each call), and put back on exit. ``routed``
    counts the calls by kernel."""

    def __init__(self, capability: tuple[int, int] | None) -> None:
        self.capability = capability
        self.routed: dict[str, int] = {}
        self._orig: dict[str, Any] = {}

    def attention(self, *args: Any, **kwargs: Any) -> Any:
        kind, out = sdpa(self.capability, args, kwargs)
        self.routed[kind] = self.routed.get(kind, 0) + 1
        if out is not None:
            return out
        return self._orig["scaled_dot_product_attention"](*args, **kwargs)

    def __enter__(self) -> CudaPaths:
        import torch.nn.functional as F

        self._orig = {"scaled_dot_product_attention": F.scaled_dot_product_attention}
        self._orig["dropout"] = F.dropout
        F.scaled_dot_product_attention = self.attention
        F.dropout = dropout(self._orig["dropout"], self.routed)
        return self

    def __exit__(self, *exc: object) -> None:
        import torch.nn.functional as F

        for name, orig in self._orig.items():
            setattr(F, name, orig)


def mode(capability: tuple[int, int] | None) -> CudaPaths:
    """Attention and dropout as CUDA runs them, while entered (:class:`CudaPaths`)."""
    return CudaPaths(capability)
