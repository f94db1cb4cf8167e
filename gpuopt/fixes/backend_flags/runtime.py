"""The backend-flag fixes' run-time form: ``torch.backends...`` attributes set to the recorded
values before the script starts, put back when the run ends."""

from __future__ import annotations

from typing import Any

from gpuopt.fixes.applied import Applied


def set_flag(name: str, value: bool, applied: Applied) -> None:
    """``torch.backends.cudnn.benchmark = True`` and the like (only ``torch.backends``)."""
    import torch

    parts = name.split(".")
    if parts[:2] != ["torch", "backends"] or len(parts) < 3:
        applied.notes.append(f"{name}: not a torch.backends flag, left alone")
        return
    owner: Any = torch
    for part in parts[1:-1]:
        owner = getattr(owner, part)
    old = getattr(owner, parts[-1])
    setattr(owner, parts[-1], value)
    applied.notes.append(f"{name} = {value}")
    applied.on_undo(lambda: setattr(owner, parts[-1], old))


__all__ = ["set_flag"]
