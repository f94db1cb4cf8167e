"""timm's ``train.py`` (pytorch-image-models): its package, the script's phases, its flags
(docs/frameworks.md#timm). ``train.py`` is the user's script (run as it is, or copied); its knobs
are command-line flags, so a fix is the flag to add, printed, never a rewrite.

Checked with timm 1.0.31's ``train.py``: ``train_one_epoch`` runs the training batches,
``validate`` the evaluation ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuopt.frameworks import FrameworkSpec, Knob
from gpuopt.model.records import Framework

NAME = "timm"

KNOBS = (
    Knob(
        call="--workers",
        argument="--workers",
        value="4",
        finding="dataloader-bound",
        evidence="train.py's loader decodes and augments in the training process with 0 workers",
    ),
    Knob(
        call="--pin-mem",
        argument="--pin-mem",
        value="",
        finding="dataloader-bound",
        evidence="pinned host batches copy to the GPU asynchronously (timm.data.create_loader)",
    ),
    Knob(
        call="--channels-last",
        argument="--channels-last",
        value="",
        finding="framework-bound",
        evidence="convolutions in channels-last layout use the GPU's faster NHWC kernels",
    ),
    Knob(
        call="--amp",
        argument="--amp",
        value="",
        finding="framework-bound",
        evidence="autocast to float16/bfloat16: tensor cores on the GPU",
        changes_training=True,
    ),
)

SPEC = FrameworkSpec(
    name=NAME,
    packages=("timm",),
    entries=("train_one_epoch",),
    knobs=KNOBS,
)

# (phase, file, function): the script's own functions (train.py is the user's file)
PHASES = (
    ("validation", "train.py", "validate"),
    ("train", "train.py", "train_one_epoch"),
)

EVALUATION = ("validation",)

STEP_KNOBS: tuple[str, ...] = ()  # train.py's per-step Python is the script's own

CALLS: tuple[str, ...] = ()  # its knobs are flags on the command line

# the script is timm's train.py when its module defines these and timm is imported
SCRIPT_FUNCTIONS = ("train_one_epoch", "validate")


def recognise(modules: Mapping[str, Any]) -> Framework | None:
    """The ``framework`` record where the script is timm's ``train.py`` (its ``__main__``
    defines :data:`SCRIPT_FUNCTIONS` and timm is imported), else None."""
    timm = modules.get("timm")
    main = modules.get("__main__")
    if timm is None or main is None:
        return None
    if not all(callable(getattr(main, f, None)) for f in SCRIPT_FUNCTIONS):
        return None
    version = getattr(timm, "__version__", None)
    return Framework(name=NAME, version=str(version) if version else None)
