"""The run-time forms of fixes: patched in while the script runs under gpuopt, no source change.

``gpuopt profile --fixes DIR`` (and ``gpuopt optimize``'s candidate runs) read ``DIR/fixes.json``
(:class:`~gpuopt.model.optimize.RuntimeFixes`) and, before the script starts, hand each part to
its fix's run-time form:

* **DataLoader settings** (:mod:`gpuopt.fixes.dataloader.runtime`): a DataLoader built at one of
  the recorded sites gets the recorded settings in place of its own;
* **Non-blocking copies** (:mod:`gpuopt.fixes.pinned_copies.runtime`, GPU-only: on a CPU-only
  machine the patch is not installed);
* **Backend flags** (:mod:`gpuopt.fixes.backend_flags.runtime`): ``torch.backends...``
  attributes set to the recorded values;
* **Model transforms** (the opt-in ``amp``, ``channels-last``, ``compile``:
  :mod:`gpuopt.fixes.model_transforms.runtime`), applied at the end of the first
  ``optimizer.step()`` in the order of :data:`MODEL_TRANSFORMS`.

Each patch is undone when the run ends (:meth:`Applied.undo`).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from gpuopt.errors import GpuoptError
from gpuopt.fixes.applied import Applied
from gpuopt.fixes.backend_flags.runtime import set_flag
from gpuopt.fixes.dataloader.runtime import patch_loaders
from gpuopt.fixes.model_transforms import runtime as model_transforms
from gpuopt.fixes.pinned_copies.runtime import patch_copies
from gpuopt.fixes.whole_step.runtime import aot
from gpuopt.model.optimize import FIXES_SCHEMA, RuntimeFixes
from gpuopt.paths import regular_input

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


def apply_fixes(
    fixes: RuntimeFixes, user_roots: list[Path], out_dir: Path | None = None
) -> Applied:
    """Patch every run-time fix in; returns what to undo. ``out_dir``: where the model
    transforms write their check (``transform_check.json``)."""
    import torch

    applied = Applied()
    if fixes.loaders:
        patch_loaders(fixes.loaders, user_roots, applied)
    if fixes.non_blocking_sites:
        if torch.cuda.is_available():
            patch_copies(fixes.non_blocking_sites, applied)
        else:
            applied.notes.append("non_blocking copies: no CUDA device, nothing to patch")
    for name, value in sorted(fixes.backend_flags.items()):
        set_flag(name, value, applied)
    if fixes.model_transforms:
        model_transforms.transform_model_at_first_step(
            list(fixes.model_transforms), TRANSFORMS, applied, out_dir
        )
    return applied


# every model transform by name, applied in this order; "aot" replaces the forward, so it comes
# last. optimize never plans "aot" as a run-time transform (its per-part graphs copy every
# parameter and saved activation a step: the aot fix captures the whole step, in the source); a
# fixes.json that lists it still runs it
TRANSFORMS: dict[str, model_transforms.Transform] = {
    "bf16_autocast": model_transforms.bf16_autocast,
    "fp16_autocast": model_transforms.fp16_autocast,
    "channels_last": model_transforms.channels_last,
    "compile": model_transforms.compile_model,
    "aot": aot,
}
MODEL_TRANSFORMS = tuple(TRANSFORMS)


__all__ = [
    "FIXES_FILE",
    "MODEL_TRANSFORMS",
    "TRANSFORMS",
    "Applied",
    "apply_fixes",
    "encode_fixes",
    "fixes_path",
    "load_fixes",
]
