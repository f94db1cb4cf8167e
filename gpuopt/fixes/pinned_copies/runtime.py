"""The pinned-copies fix's run-time form: ``Tensor.to(...)`` / ``Tensor.cuda(...)`` called from
one of the recorded lines gets ``non_blocking=True`` when the copy goes from a pinned host tensor
(GPU-only: :func:`gpuopt.fixes.runtime.apply_fixes` installs it only with a CUDA device)."""

from __future__ import annotations

import os
import sys
from typing import Any

from gpuopt.fixes.applied import Applied


def patch_copies(sites: list[str], applied: Applied) -> None:
    import torch

    lines = {_site_key(s) for s in sites}
    orig_to, orig_cuda = torch.Tensor.to, torch.Tensor.cuda

    def _from_site() -> bool:
        f = sys._getframe(2)
        return (os.path.realpath(f.f_code.co_filename), f.f_lineno) in lines

    def to(t: Any, *args: Any, **kwargs: Any) -> Any:
        if "non_blocking" not in kwargs and t.device.type == "cpu" and _from_site():
            kwargs["non_blocking"] = t.is_pinned()
        return orig_to(t, *args, **kwargs)

    def cuda(t: Any, *args: Any, **kwargs: Any) -> Any:
        if "non_blocking" not in kwargs and t.device.type == "cpu" and _from_site():
            kwargs["non_blocking"] = t.is_pinned()
        return orig_cuda(t, *args, **kwargs)

    torch.Tensor.to = to  # type: ignore[method-assign,assignment]
    torch.Tensor.cuda = cuda  # type: ignore[method-assign,assignment]
    applied.notes.append(f"non_blocking=True for pinned host tensors at {', '.join(sites)}")

    def undo() -> None:
        torch.Tensor.to = orig_to  # type: ignore[method-assign]
        torch.Tensor.cuda = orig_cuda  # type: ignore[method-assign]

    applied.on_undo(undo)


def _site_key(site: str) -> tuple[str, int]:
    path, _, line = site.rpartition(":")
    return os.path.realpath(path), int(line) if line.isdigit() else -1


__all__ = ["patch_copies"]
