"""The run-time forms of fixes: patched in while the script runs under gpuopt, no source change.

``gpuopt profile --fixes DIR`` (and ``gpuopt optimize``'s candidate runs) read ``DIR/fixes.json``
(:class:`~gpuopt.model.optimize.RuntimeFixes`) and, before the script starts:

* **DataLoader settings**: a DataLoader built at one of the recorded sites (the user's line that
  calls ``DataLoader(...)``, found as the DataLoader probe finds it) gets the recorded
  ``num_workers`` / ``persistent_workers`` / ``prefetch_factor`` / ``pin_memory`` in place of its
  own; every other DataLoader is left as it is.
* **Non-blocking copies**: ``Tensor.to(...)`` / ``Tensor.cuda(...)`` called from one of the
  recorded lines gets ``non_blocking=True`` when the copy goes from a pinned host tensor to a
  CUDA device (GPU-only: on a CPU-only machine the patch is not installed).
* **Backend flags**: ``torch.backends...`` attributes set to the recorded values.
* **Model transforms** (the opt-in ``amp``, ``channels-last``, ``compile``): at the end of the
  first ``optimizer.step()``, the model (:mod:`gpuopt.script.model_finder`) gets its forward
  under bf16 autocast with float32 outputs (or float16 autocast with the loss scaled by a
  ``GradScaler``: :mod:`gpuopt.fixes.model_transforms.loss_scaling`), its parameters in
  channels_last, ``model.compile()`` — in that order; the first step runs as the script wrote it.

Each patch is undone when the run ends (:meth:`Applied.undo`).
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from gpuopt import torch_compat
from gpuopt.atomic_write import write_atomic
from gpuopt.debug import logger
from gpuopt.errors import GpuoptError
from gpuopt.model.optimize import FIXES_SCHEMA, LoaderSettings, RuntimeFixes
from gpuopt.paths import regular_input

log = logger(__name__)

FIXES_FILE = "fixes.json"


def fixes_path(path: Path) -> Path:
    """``DIR/fixes.json`` for a directory, else the file itself."""
    return path / FIXES_FILE if path.is_dir() else path


def load_fixes(path: Path) -> RuntimeFixes:
    """Read ``fixes.json`` (or ``DIR/fixes.json``); a one-line error when it cannot be used."""
    p = fixes_path(path)
    regular_input(p, "--fixes")
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise GpuoptError(
            f"{p}: no such file; --fixes takes the directory gpuopt optimize --apply wrote"
        ) from None
    except OSError as exc:
        raise GpuoptError(f"{p}: cannot read: {exc.strerror or exc}") from None
    try:
        fixes = msgspec.json.decode(data, type=RuntimeFixes)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise GpuoptError(f"{p}: not a gpuopt fixes file: {exc}") from None
    except RecursionError:  # msgspec's own depth limit
        raise GpuoptError(f"{p}: not a gpuopt fixes file: JSON nested too deeply") from None
    if fixes.schema != FIXES_SCHEMA:
        raise GpuoptError(f"{p}: schema {fixes.schema!r}, this gpuopt reads {FIXES_SCHEMA!r}")
    return fixes


def encode_fixes(fixes: RuntimeFixes) -> bytes:
    return msgspec.json.format(msgspec.json.encode(fixes), indent=2) + b"\n"


@dataclass
class Applied:
    """The patches in place, and how to take them out."""

    notes: list[str] = field(default_factory=list)
    late_notes: list[str] = field(default_factory=list)  # what happened once the run was under way
    _undo: list[Callable[[], None]] = field(default_factory=list)

    def undo(self) -> None:
        for fn in reversed(self._undo):
            try:
                fn()
            except Exception as exc:  # undoing must never hide how the run ended
                log.debug("a fix not undone: %s", exc, exc_info=True)
        self._undo.clear()


def apply_fixes(
    fixes: RuntimeFixes, user_roots: list[Path], out_dir: Path | None = None
) -> Applied:
    """Patch every run-time fix in; returns what to undo. ``out_dir``: where the model
    transforms write their check (:data:`TRANSFORM_CHECK`)."""
    import torch

    applied = Applied()
    if fixes.loaders:
        _patch_loaders(fixes.loaders, user_roots, applied)
    if fixes.non_blocking_sites:
        if torch.cuda.is_available():
            _patch_copies(fixes.non_blocking_sites, applied)
        else:
            applied.notes.append("non_blocking copies: no CUDA device, nothing to patch")
    for name, value in sorted(fixes.backend_flags.items()):
        _set_flag(name, value, applied)
    if fixes.model_transforms:
        _transform_model_at_first_step(list(fixes.model_transforms), applied, out_dir)
    return applied


# applied in this order; "aot" replaces the forward, so it comes last. optimize never plans "aot"
# as a run-time transform (its per-part graphs copy every parameter and saved activation a step:
# the aot fix captures the whole step, in the source); a fixes.json that lists it still runs it
MODEL_TRANSFORMS = ("bf16_autocast", "fp16_autocast", "channels_last", "compile", "aot")


TRANSFORM_CHECK = "transform_check.json"


def _transform_model_at_first_step(names: list[str], applied: Applied, out: Path | None) -> None:
    """After the first step: the model, checked on the batch of its last call — its outputs in
    eval mode (no dropout, no statistics updated) before and after the transforms, written to
    ``out/transform_check.json`` — so that verification can tell a transform that changes
    the model's numbers from one that only changes how dropout draws its masks."""
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
        ordered = [n for n in MODEL_TRANSFORMS if n in names]
        if scaling is not None:
            refused = scaling.activate(optimizer, next(model.parameters()).device.type)
            if refused is not None:
                applied.late_notes.append(refused)
                ordered.remove("fp16_autocast")
        if out is None:
            for name in ordered:
                _TRANSFORMS[name](model, inputs)
        check = _checked(model, inputs, ordered) if out is not None else {}
        if out is not None:
            check["model"] = type(model).__name__
            write_atomic(out / TRANSFORM_CHECK, json.dumps(check).encode())
        applied.late_notes.append(f"model transforms on {type(model).__name__}: {names}")

    handle = register_optimizer_step_post_hook(stepped)
    applied.notes.append(f"model transforms after the first step: {', '.join(names)}")
    applied._undo += [calls.remove, handle.remove]


def _loss_scaling(names: list[str], applied: Applied) -> Any:
    """fp16 autocast's GradScaler, its patches installed before the script runs (None without
    ``fp16_autocast``)."""
    if "fp16_autocast" not in names:
        return None
    from gpuopt.fixes.model_transforms.loss_scaling import LossScaling

    scaling = LossScaling()
    scaling.install()
    applied._undo.append(scaling.undo)
    return scaling


def _checked(model: Any, inputs: tuple[Any, ...], names: list[str]) -> dict[str, Any]:
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
            _TRANSFORMS[name](model, inputs)
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
            _TRANSFORMS[name](model, inputs)
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


def _bf16_autocast(model: Any, inputs: tuple[Any, ...]) -> None:
    _autocast(model, "bfloat16")


def _fp16_autocast(model: Any, inputs: tuple[Any, ...]) -> None:
    """float16 autocast; the loss scaling that float16 gradients need is
    :class:`~gpuopt.fixes.model_transforms.loss_scaling.LossScaling`, activated before this."""
    _autocast(model, "float16")


def _channels_last(model: Any, inputs: tuple[Any, ...]) -> None:
    import torch

    model.to(memory_format=torch.channels_last)


def _compile(model: Any, inputs: tuple[Any, ...]) -> None:
    model.compile()


def _aot(model: Any, inputs: tuple[Any, ...]) -> None:
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


_TRANSFORMS = {
    "bf16_autocast": _bf16_autocast,
    "fp16_autocast": _fp16_autocast,
    "channels_last": _channels_last,
    "compile": _compile,
    "aot": _aot,
}


def _patch_loaders(loaders: list[LoaderSettings], roots: list[Path], applied: Applied) -> None:
    from torch.utils.data import DataLoader

    from gpuopt.sites import SiteResolver

    wanted = {s.site: s.knobs() for s in loaders}
    resolver = SiteResolver(roots)
    orig = DataLoader.__init__
    signature = inspect.signature(orig)

    def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
        knobs = _knobs_for_caller(resolver, wanted)
        if knobs:
            bound = signature.bind(loader, *args, **kwargs)
            bound.arguments.update(knobs)
            if int(bound.arguments.get("num_workers", 0) or 0) == 0:
                bound.arguments.pop("persistent_workers", None)
                bound.arguments.pop("prefetch_factor", None)
            orig(*bound.args, **bound.kwargs)
            return
        orig(loader, *args, **kwargs)

    __init__.__wrapped__ = orig  # type: ignore[attr-defined]
    DataLoader.__init__ = __init__  # type: ignore[method-assign,assignment]
    applied.notes.append(
        "DataLoader settings: "
        + "; ".join(f"{site} {_knob_text(k)}" for site, k in sorted(wanted.items()))
    )

    def undo() -> None:
        DataLoader.__init__ = orig  # type: ignore[method-assign]

    applied._undo.append(undo)


def _knobs_for_caller(resolver: Any, wanted: dict[str, dict[str, int | bool]]) -> dict[str, Any]:
    try:
        user, _, _ = resolver.locate(sys._getframe(2))
        if user is None:
            return {}
        return dict(wanted.get(resolver.site(user.f_code, user.f_lasti), {}))
    except Exception as exc:  # a patch must never break the user's DataLoader
        log.debug("a DataLoader's fixed settings not found: %s", exc, exc_info=True)
        return {}


def _knob_text(knobs: dict[str, int | bool]) -> str:
    return ", ".join(f"{k}={v}" for k, v in knobs.items())


def _patch_copies(sites: list[str], applied: Applied) -> None:
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

    applied._undo.append(undo)


def _site_key(site: str) -> tuple[str, int]:
    path, _, line = site.rpartition(":")
    return os.path.realpath(path), int(line) if line.isdigit() else -1


def _set_flag(name: str, value: bool, applied: Applied) -> None:
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
    applied._undo.append(lambda: setattr(owner, parts[-1], old))
