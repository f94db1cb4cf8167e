"""PyTorch Lightning (``lightning`` 2.x, or the older ``pytorch_lightning`` package): its code, its
loop's phases, the user's call into it, its knobs (docs/frameworks.md#lightning).

Checked with lightning 2.6.6: the training batch is fetched under ``loops/fit_loop.py`` and
``loops/training_epoch_loop.py``, a validation batch under ``loops/evaluation_loop.py`` (also
when training calls it), the sanity check's under ``Trainer._run_sanity_check``
(``trainer/trainer.py``) around the evaluation loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuopt.frameworks import FrameworkSpec, Knob
from gpuopt.model.records import Framework

NAME = "lightning"

# the Trainer's settings that remove a framework-bound step's Python (hooks, logging, the bar)
KNOBS = (
    Knob(
        call="Trainer",
        argument="log_every_n_steps",
        value="50",
        finding="framework-bound",
        evidence=(
            "every self.log(on_step=True) value goes through the logger connector and the "
            "loggers each step it logs (lightning/pytorch/trainer/connectors/logger_connector)"
        ),
    ),
    Knob(
        call="Trainer",
        argument="enable_progress_bar",
        value="False",
        finding="framework-bound",
        evidence=(
            "the progress bar refreshes its metrics each batch "
            "(lightning/pytorch/callbacks/progress/tqdm_progress.py on_train_batch_end): "
            "0.71 of the autoencoder's 5.40 ms CPU a step (benchmarks/frameworks)"
        ),
    ),
    Knob(
        call="Trainer",
        argument="num_sanity_val_steps",
        value="0",
        finding="framework-bound",
        evidence="the validation sanity check runs 2 validation batches before training starts",
    ),
    Knob(
        call="Trainer",
        argument="benchmark",
        value="True",
        finding="framework-bound",
        evidence="cuDNN's autotuner picks the fastest convolution for fixed input shapes",
    ),
    Knob(
        call="Trainer",
        argument="precision",
        value='"bf16-mixed"',
        finding="amp",
        evidence="bfloat16 autocast: tensor cores on an Ampere or later GPU",
        changes_training=True,
    ),
    Knob(
        call="Trainer",
        argument="accumulate_grad_batches",
        value="4",
        finding="accumulation",
        evidence="the optimizer steps every N batches (loops/optimization/automatic.py): with "
        "the DataLoader's batch_size divided by N, the same effective batch from N micro-batches, "
        "about 1/N of the activations (gpuopt optimize --fix accumulation sets both)",
        changes_training=True,
    ),
)

SPEC = FrameworkSpec(
    name=NAME,
    packages=("lightning", "pytorch_lightning", "lightning_fabric"),
    entries=("Trainer.fit", "Trainer.validate", "Trainer.test", "Trainer.predict"),
    knobs=KNOBS,
)

# the calls that build the object a knob is set on, as a user's source writes them
CALLS = ("Trainer", "L.Trainer", "pl.Trainer", "lightning.Trainer", "pytorch_lightning.Trainer")

# (phase, file inside the package, function or "" for any): the first that a batch's stack holds
# names its phase, in this order (the sanity check runs the evaluation loop; training calls the
# evaluation loop for its validation)
PHASES = (
    ("sanity-check", "trainer/trainer.py", "_run_sanity_check"),
    ("validation", "loops/evaluation_loop.py", ""),
    ("predict", "loops/prediction_loop.py", ""),
    ("train", "loops/training_epoch_loop.py", ""),
    ("train", "loops/fit_loop.py", ""),
)

# the knobs that take Python out of every step (the framework-bound finding's fix, planned by
# `gpuopt optimize`); the others are named where they apply
STEP_KNOBS = ("enable_progress_bar",)

# the framework-bound finding's words: what its per-step Python is, and the advice past the knobs
BOUND_PARTS = "hooks, closure, logging, progress bar"
BOUND_ADVICE = (
    "log fewer values a step (self.log(..., on_step=False) where an epoch's mean will do; with "
    "a logger on, Trainer(log_every_n_steps=50) or more)",
    "a larger batch (the DataLoader's batch_size in *_dataloader() or the script) spreads "
    "Lightning's fixed cost per step over more samples",
)

# reads no Trainer setting removes, by the function that makes them: what the user's code does
# that causes them (lightning/pytorch/trainer/connectors/logger_connector/result.py metrics())
READ_ADVICE = {
    "convert_tensors_to_scalars": (
        "Lightning turns every value logged with self.log(..., prog_bar=True) into a Python "
        "number each step (and, at a logging step, every logged value): log per-step values "
        "with prog_bar=False, or on_step=False where an epoch's mean will do"
    ),
}

# the phases whose batches are no training step (the memory probe records a training iteration)
EVALUATION = ("sanity-check", "validation", "predict")


def recognise(modules: Mapping[str, Any]) -> Framework | None:
    """The ``framework`` record where the run imported Lightning (its name and version), else
    None; the entry, phases and Python share are filled in by the run's assembly."""
    for pkg in ("lightning", "pytorch_lightning"):
        mod = modules.get(pkg)
        if mod is not None:
            version = getattr(mod, "__version__", None)
            return Framework(name=NAME, version=str(version) if version else None)
    return None
