"""gpuopt: find out why a PyTorch training run leaves its GPU idle, and fix it.

The Python API (docs/api.md)::

    import gpuopt
    profile = gpuopt.load("gpuopt-runs/train-20250314-092653")   # or a profile.json, or a trace
    profile.findings[0].fix
    frames = profile.frames()                                     # pandas DataFrames
    gpuopt.step()                                                 # mark a step without an optimizer

This module must stay import-light: ``gpuopt --help`` and ``gpuopt report`` never import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from gpuopt.model.profile import Profile

__version__ = "0.1.0"

__all__ = ["__version__", "load", "step"]


def load(path: str | Path) -> Profile:
    """The typed :class:`~gpuopt.model.profile.Profile` of a run directory, a ``profile.json``,
    a PyTorch profiler trace (``.json``/``.json.gz``) or a folder of per-rank traces.

    Bad input raises :class:`gpuopt.errors.GpuoptError` with a one-line reason. Nothing in the
    input is executed or unpickled.
    """
    from gpuopt.loading import load as load_path

    return load_path(path)


def step() -> None:
    """Mark the end of one training step, for loops without a ``torch.optim`` optimizer.

    Outside ``gpuopt profile`` this is a no-op, so scripts can call it unconditionally.
    """
    from gpuopt.probes.steps import mark_step

    mark_step(source="gpuopt.step")
