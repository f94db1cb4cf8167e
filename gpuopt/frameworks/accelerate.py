"""Hugging Face accelerate: its code, the user's calls into it, and the ``Accelerator(...)``
settings gpuopt names (docs/frameworks.md)."""

from __future__ import annotations

from gpuopt.frameworks import FrameworkSpec, Knob

SPEC = FrameworkSpec(
    name="accelerate",
    packages=("accelerate",),
    entries=("Accelerator.prepare", "AcceleratedOptimizer.step", "Accelerator.backward"),
    knobs=(
        Knob(
            "Accelerator",
            "mixed_precision",
            '"bf16"',
            "amp",
            "accelerate runs the prepared model's forward under autocast (bf16 needs no "
            "GradScaler)",
            changes_training=True,
        ),
        Knob(
            "Accelerator",
            "dataloader_config",
            "DataLoaderConfiguration(non_blocking=True)",
            "blocking-h2d",
            "prepared DataLoaders move each batch with .to(device, non_blocking=True) (with "
            "pinned memory), instead of a blocking copy",
        ),
    ),
)

# the framework-bound finding's words: what its per-step Python is, and the advice (accelerate
# has no setting that removes it)
BOUND_PARTS = "its optimizer, backward and DataLoader wrappers"
BOUND_ADVICE = (
    "gather and log metrics (accelerator.gather_for_metrics, accelerator.log) every N steps, "
    "not every step",
    "a larger batch in the script's DataLoader(...) spreads accelerate's fixed cost per step "
    "(AcceleratedOptimizer.step, the prepared DataLoader's batch move) over more samples",
)
