"""The aot fix's run-time form (a ``fixes.json`` written before optimize planned aot as the whole
step captured still names it): the model's forward through Nimble's schedule."""

from __future__ import annotations

from typing import Any


def aot(model: Any, inputs: tuple[Any, ...]) -> None:
    """The forward through Nimble's schedule in training mode (forward graph on several streams,
    backward on one; :func:`gpuopt.aot.api.schedule`), planned on the batch of the model's last
    call. A call with other shapes (a short last batch) or keyword arguments runs the model's
    own forward: a schedule is static."""
    import torch

    from gpuopt.aot.api import schedule

    def shapes(args: tuple[Any, ...]) -> list[tuple[tuple[int, ...], Any]]:
        return [(tuple(a.shape), a.dtype) for a in args if isinstance(a, torch.Tensor)]

    scheduled = schedule(model, inputs, training=True)
    own, planned = model.forward, shapes(inputs)

    def forward(*args: Any, **kwargs: Any) -> Any:
        if kwargs or shapes(args) != planned:
            return own(*args, **kwargs)
        return scheduled(*args)

    model.forward = forward


__all__ = ["aot"]
