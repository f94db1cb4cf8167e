"""The model transforms' run-time form (the opt-in ``amp``, ``channels-last``, ``compile``): at the
end of the first ``optimizer.step()``, the model (:mod:`gpuopt.script.model_finder`) gets its
forward under bf16 autocast with float32 outputs (or float16 autocast with the loss scaled by a
``GradScaler``: :mod:`gpuopt.fixes.model_transforms.loss_scaling`), its parameters in
channels_last, ``model.compile()``, in that order; the first step runs as the script wrote it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpuopt import torch_compat
from gpuopt.atomic_write import write_atomic
from gpuopt.debug import logger
from gpuopt.fixes.applied import Applied

log = logger(__name__)

Transform = Callable[[Any, tuple[Any, ...]], None]  # (model, the inputs of its last call)

TRANSFORM_CHECK = "transform_check.json"


def transform_model_at_first_step(
    names: list[str], transforms: Mapping[str, Transform], applied: Applied, out: Path | None
) -> None:
    """After the first step: the model, checked on the batch of its last call — its outputs in
    eval mode (no dropout, no statistics updated) before and after the transforms, written to
    ``out/transform_check.json`` — so that verification can tell a transform that changes
    the model's numbers from one that only changes how dropout draws its masks. ``transforms``:
    every transform by name, in the order they apply (``MODEL_TRANSFORMS``:
    :mod:`gpuopt.fixes.runtime`)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from gpuopt.script.model_finder import OutermostCalls

    calls = OutermostCalls(keep_inputs=out is not None or "aot" in names)
    calls.install()
    scaling = _loss_scaling(names, applied)

    done: list[bool] = []

    def stepped(optimizer: Any, args: Any, kwargs: Any) -> None:
        # torch is iterating its hooks: this one stays registered (removed at the end), idle
        if done:
            return
        done.append(True)
        calls.remove()
        found = calls.model_for(optimizer)
        if found is None:
            applied.late_notes.append("model transforms: no module holds the optimizer's params")
            return
        model, inputs = found
        ordered = [n for n in transforms if n in names]
        if scaling is not None:
            refused = scaling.activate(optimizer, next(model.parameters()).device.type)
            if refused is not None:
                applied.late_notes.append(refused)
                ordered.remove("fp16_autocast")
        if out is None:
            for name in ordered:
                transforms[name](model, inputs)
        check = _checked(model, inputs, ordered, transforms) if out is not None else {}
        if out is not None:
            check["model"] = type(model).__name__
            write_atomic(out / TRANSFORM_CHECK, json.dumps(check).encode())
        applied.late_notes.append(f"model transforms on {type(model).__name__}: {names}")

    handle = register_optimizer_step_post_hook(stepped)
    applied.notes.append(f"model transforms after the first step: {', '.join(names)}")
    applied.on_undo(calls.remove)
    applied.on_undo(handle.remove)


def _loss_scaling(names: list[str], applied: Applied) -> Any:
    """fp16 autocast's GradScaler, its patches installed before the script runs (None without
    ``fp16_autocast``)."""
    if "fp16_autocast" not in names:
        return None
    from gpuopt.fixes.model_transforms.loss_scaling import LossScaling

    scaling = LossScaling()
    scaling.install()
    applied.on_undo(scaling.undo)
    return scaling


def _checked(
    model: Any, inputs: tuple[Any, ...], names: list[str], transforms: Mapping[str, Transform]
) -> dict[str, Any]:
    """Apply ``names`` to ``model`` (in its own mode, as the run goes on); its eval-mode outputs
    on ``inputs`` before and after. Not for ``aot``, whose schedule is traced in training mode
    and proven by its own simulation (:mod:`gpuopt.fixes.whole_step.aot_check`)."""

    from gpuopt.aot.api import max_abs_diff

    was_training = model.training
    out: dict[str, Any] = {"transforms": names}
    compare = "aot" not in names
    done: list[str] = []
    try:
        before = _eval_outputs(model, inputs) if compare else None
        model.train(was_training)
        for name in names:
            transforms[name](model, inputs)
            done.append(name)
        if compare:
            after = _eval_outputs(model, inputs)
            diff = max_abs_diff(before, after)
            scale = max((float(t.abs().max()) for t in _tensors(before)), default=0.0)
            out.update(max_abs_diff=diff, scale=scale)
            out["rel_diff"] = diff / scale if diff is not None and scale > 0 else diff
    except Exception as exc:  # the check must not stop the run: its absence is the verdict
        out["error"] = f"{type(exc).__name__}: {exc}"
        log.debug("the model transforms' check failed", exc_info=True)
        model.train(was_training)
        for name in names[len(done) :]:  # the run still gets every transform
            transforms[name](model, inputs)
    finally:
        model.train(was_training)
    return out


def _eval_outputs(model: Any, inputs: tuple[Any, ...]) -> Any:
    import torch

    model.eval()
    with torch.no_grad():
        return model(*inputs)


def _tensors(value: Any) -> list[Any]:
    import torch

    pytree = torch_compat.pytree()
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor) and t.numel()]


def _autocast(model: Any, dtype_name: str) -> None:
    """The forward under autocast to ``dtype_name``, its outputs of that dtype back in float32
    (so the loss and everything after the model run as the script wrote them)."""
    import torch

    pytree = torch_compat.pytree()
    dtype = getattr(torch, dtype_name)
    device = next(model.parameters()).device.type
    inner = model.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        with torch.autocast(device_type=device, dtype=dtype):
            out = inner(*args, **kwargs)
        return pytree.tree_map(
            lambda t: t.float() if isinstance(t, torch.Tensor) and t.dtype == dtype else t, out
        )

    model.forward = forward


def bf16_autocast(model: Any, inputs: tuple[Any, ...]) -> None:
    _autocast(model, "bfloat16")


def fp16_autocast(model: Any, inputs: tuple[Any, ...]) -> None:
    """float16 autocast; the loss scaling that float16 gradients need is
    :class:`~gpuopt.fixes.model_transforms.loss_scaling.LossScaling`, activated before this."""
    _autocast(model, "float16")


def channels_last(model: Any, inputs: tuple[Any, ...]) -> None:
    import torch

    model.to(memory_format=torch.channels_last)


def compile_model(model: Any, inputs: tuple[Any, ...]) -> None:
    model.compile()


__all__ = [
    "TRANSFORM_CHECK",
    "Transform",
    "bf16_autocast",
    "channels_last",
    "compile_model",
    "fp16_autocast",
    "transform_model_at_first_step",
]
