"""Planted (GPU only): a pinned non_blocking upload and a pageable blocking one."""

import torch


def pinned(src: torch.Tensor) -> torch.Tensor:
    return src.to("cuda", non_blocking=True)  # PINNED


def pageable(src: torch.Tensor) -> torch.Tensor:
    return src.to("cuda")  # PAGEABLE
