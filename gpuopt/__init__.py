"""gpuopt: find out why a PyTorch training run leaves its GPU idle, and fix it.

This module must stay import-light: ``gpuopt --help`` and ``gpuopt report`` never import torch.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "step"]


def step() -> None:
    """Mark the end of one training step, for loops without a ``torch.optim`` optimizer.

    Outside ``gpuopt profile`` this is a no-op, so scripts can call it unconditionally.
    """
    from gpuopt.probes.steps import mark_step

    mark_step(source="gpuopt.step")
