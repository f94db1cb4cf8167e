"""Planted: host→device copies to the ``meta`` device (a stand-in second device on a CPU-only
machine) and device→host reads of fake ``cuda`` tensors (``FakeTensorMode``); markers name lines."""

import torch


def upload(x: torch.Tensor, big: torch.Tensor) -> None:
    x.to("meta")  # H2D-BLOCKING
    x.to("meta", non_blocking=True)  # H2D-NON-BLOCKING
    buf = torch.empty(big.shape, device="meta")
    buf.copy_(big)  # H2D-COPY
    x.to(torch.float64)  # same device: a dtype conversion, not a transfer


def readback(g: torch.Tensor) -> None:
    g.cpu()  # D2H-CPU
    g.to("cpu", non_blocking=True)  # D2H-NON-BLOCKING
    g.to("cpu")  # D2H-TO
    try:
        g.sum().item()  # SYNC-FAKE-ITEM
    except Exception:  # a fake tensor has no value to read; the call still happened
        pass
    try:
        torch.cuda.synchronize()  # SYNC-SYNCHRONIZE
    except (AssertionError, RuntimeError):  # no CUDA in this torch build
        pass
