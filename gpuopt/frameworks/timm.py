"""timm's ``train.py`` (pytorch-image-models): its package, the script's phases, its flags
(docs/frameworks.md#timm). ``train.py`` is the user's script (run as it is, or copied); its knobs
are command-line flags, so a fix is the flag to add, printed, never a rewrite.

Checked with timm 1.0.28's ``train.py``: ``train_one_epoch`` runs the training batches,
``validate`` the evaluation ones.
"""

from __future__ import annotations

import argparse
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
        finding="channels-last",
        evidence="convolutions in channels-last layout use the GPU's faster NHWC kernels",
    ),
    Knob(
        call="--amp",
        argument="--amp",
        value="",
        finding="amp",
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

# the framework-bound finding's words: what its per-step Python is, and the advice
BOUND_PARTS = "its model, loss, optimizer and scheduler code"
BOUND_ADVICE = (
    "a larger batch on the command line (-b / --batch-size) spreads the fixed cost per step "
    "over more samples",
    "log less often (a larger --log-interval)",
)

CALLS: tuple[str, ...] = ()  # its knobs are flags on the command line

# the flags train.py builds its DataLoader from (timm.data.create_loader), by the DataLoader
# argument each sets; persistent workers are create_loader's default
LOADER_FLAGS = {"num_workers": "--workers", "pin_memory": "--pin-mem"}

# train.py imports these (a script that builds a timm model alone does not)
SCRIPT_PACKAGES = ("timm.data", "timm.loss", "timm.optim", "timm.scheduler")

# the flags gpuopt's advice names (KNOBS): train.py's command line takes them, a script of one's
# own built from timm's factories in a loop of its own does not
SCRIPT_FLAGS = frozenset(k.argument for k in KNOBS)


def recognise(modules: Mapping[str, Any]) -> Framework | None:
    """The ``framework`` record where the script is timm's ``train.py`` or a copy of it: it
    imported :data:`SCRIPT_PACKAGES` (timm's data, loss, optimizer and scheduler factories) and
    its command line (an argument parser among the globals of ``modules["__main__"]``, the
    script's module) takes :data:`SCRIPT_FLAGS`, the flags gpuopt's fixes name; else None: a
    script built from timm's library trains in a loop of its own, and has none of those flags."""
    timm = modules.get("timm")
    if timm is None or not all(m in modules for m in SCRIPT_PACKAGES):
        return None
    if not SCRIPT_FLAGS <= _command_line(modules.get("__main__")):
        return None
    version = getattr(timm, "__version__", None)
    return Framework(name=NAME, version=str(version) if version else None)


def _command_line(main: Any) -> set[str]:
    """The option strings of the argument parsers among the module's globals (``train.py``'s
    ``parser``; an argument group's options are its parser's)."""
    found: set[str] = set()
    for value in list(getattr(main, "__dict__", {}).values()):
        if isinstance(value, argparse.ArgumentParser):
            found |= set(getattr(value, "_option_string_actions", {}))
    return found
