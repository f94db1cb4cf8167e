"""The Hugging Face ``Trainer`` (transformers): its code, the user's calls into its loop, and the
``TrainingArguments`` settings gpuopt names (docs/frameworks.md)."""

from __future__ import annotations

from gpuopt.frameworks import FrameworkSpec, Knob

TA = "TrainingArguments"

SPEC = FrameworkSpec(
    name="transformers",
    packages=("transformers",),
    # the Trainer's functions that build an evaluation loader end the entries: a DataLoader
    # built in one of them is the eval phase's (detect.loader_origins)
    entries=(
        "Trainer.train",
        "Trainer.evaluate",
        "Trainer.predict",
        "Trainer.get_eval_dataloader",
        "Trainer.get_test_dataloader",
    ),
    knobs=(
        Knob(
            TA,
            "logging_nan_inf_filter",
            "False",
            "sync-in-step",
            "trainer.py's training loop reads torch.isnan(loss) or torch.isinf(loss) back to the "
            "host every step while it is True (the default): two reads a step that wait for the "
            "GPU",
        ),
        Knob(
            TA,
            "dataloader_num_workers",
            "4",
            "dataloader-bound",
            "Trainer.get_train_dataloader builds its DataLoader with num_workers from it "
            "(default 0: batches made in the training process, between steps)",
        ),
        Knob(
            TA,
            "dataloader_pin_memory",
            "True",
            "pageable-h2d",
            "the Trainer's DataLoaders pin their batches with it (default True)",
        ),
        Knob(
            TA,
            "dataloader_persistent_workers",
            "True",
            "dataloader-bound",
            "the Trainer's DataLoaders keep their workers across epochs with it (default False: "
            "workers started again at every epoch)",
        ),
        Knob(
            TA,
            "dataloader_prefetch_factor",
            "4",
            "dataloader-bound",
            "batches each worker prepares ahead (with dataloader_num_workers > 0)",
        ),
        Knob(
            TA,
            "bf16",
            "True",
            "amp",
            "the Trainer runs the forward under bf16 autocast (accelerate's mixed_precision)",
            changes_training=True,
        ),
        Knob(
            TA,
            "tf32",
            "True",
            "tf32",
            "the Trainer sets torch.backends.cuda.matmul.allow_tf32 (Ampere or newer)",
            changes_training=True,
        ),
        Knob(
            TA,
            "torch_compile",
            "True",
            "compile",
            "the Trainer wraps the model in torch.compile before training",
            changes_training=True,
        ),
        Knob(
            TA,
            "gradient_accumulation_steps",
            "4",
            "accumulation",
            "the optimizer steps every N batches: with per_device_train_batch_size divided by N, "
            "the same effective batch from N micro-batches, about 1/N of the activations "
            "(gpuopt optimize --fix accumulation sets both)",
            changes_training=True,
        ),
        Knob(
            TA,
            "logging_steps",
            "100",
            "sync-in-step",
            "at each logging step the Trainer reads the accumulated loss and the gradient norm "
            "back to the host (_maybe_log_save_evaluate)",
        ),
        Knob(
            TA,
            "disable_tqdm",
            "True",
            "framework-bound",
            "the Trainer's ProgressCallback (trainer_callback.py on_step_end) updates its tqdm "
            "bar every step",
        ),
        Knob(
            TA,
            "eval_steps",
            "500",
            "eval-in-step",
            "with eval_strategy='steps' the Trainer stops training for a full evaluation every "
            "eval_steps steps",
        ),
    ),
)

# what the Trainer's DataLoader(...) arguments are called in TrainingArguments
LOADER_KNOBS: dict[str, str] = {
    "num_workers": "dataloader_num_workers",
    "pin_memory": "dataloader_pin_memory",
    "persistent_workers": "dataloader_persistent_workers",
    "prefetch_factor": "dataloader_prefetch_factor",
}

# the knobs that take Python out of every step (the framework-bound finding's fix)
STEP_KNOBS = ("disable_tqdm",)

# the framework-bound finding's words: what its per-step Python is, and the advice past the knobs
BOUND_PARTS = "the Trainer's loop, callbacks, logging, progress bar"
BOUND_ADVICE = (
    "log less often: a larger TrainingArguments(logging_steps=...) (each logging step reads the "
    "loss and the gradient norm back to the host and runs every callback's on_log)",
    "a larger TrainingArguments(per_device_train_batch_size=...) spreads the Trainer's fixed "
    "cost per step over more samples",
)
