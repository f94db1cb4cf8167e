"""The fixes ``gpuopt optimize`` knows, by name (the contract's ``--fix NAME``), with what each one
is for and how it can reach a run. Pure data: each fix plans itself in its module or folder of
:mod:`gpuopt.fixes`, and :data:`gpuopt.fixes.plan.PLANNERS` names each fix's planner."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FixKind:
    name: str
    what: str  # one line: what the fix changes
    findings: tuple[str, ...]  # finding ids that call for it
    runtime: bool  # has a run-time form
    source: bool  # has a source form (a libcst rewrite)
    opt_in: bool = False  # changes numerics or the optimisation: only with --fix NAME
    gpu_only: bool = False  # does nothing on a machine without CUDA
    expected: str = ""  # for suggestions: the expected effect, said as an expectation
    gpu_gain: bool = False  # applies on a CPU too, but what it saves costs time only on a GPU
    tolerance: float | None = None  # its stated relative tolerance on the losses (rounding)
    settle_steps: int = 0  # steps after it takes effect that its measure leaves out (compiling)
    transform: str = ""  # its model transform (gpuopt.fixes.runtime.MODEL_TRANSFORMS)
    # changes the samples a step takes: gain in samples/s, training compared after the same
    # number of samples (never step for step)
    per_sample: bool = False
    # what it saves falls at epoch starts too (workers starting): its gain is the training's wall
    # time, every step of a run counted (gpuopt.optimize.measure.speed, whole=True)
    whole_run: bool = False


CATALOGUE: tuple[FixKind, ...] = (
    FixKind(
        "dataloader",
        "DataLoader num_workers / persistent_workers / prefetch_factor (pin_memory with a GPU), "
        "chosen by a sweep that times the DataLoader alone",
        ("dataloader-bound",),
        runtime=True,
        source=True,
        whole_run=True,
    ),
    FixKind(
        "pinned-copies",
        "pinned host memory and non_blocking=True host-to-device copies",
        ("pageable-h2d", "blocking-h2d"),
        runtime=True,
        source=True,
        gpu_only=True,
    ),
    FixKind(
        "syncs",
        "per-step .item() / float() reads accumulated on the device, read where the script "
        "uses them",
        ("sync-in-step",),
        runtime=False,
        source=True,
        gpu_gain=True,
    ),
    FixKind(
        "graph-breaks",
        "a print, logging call or .item() read inside a torch.compile'd function moved to the "
        "end of the function, before its return: the graph break falls after the tensor work",
        ("graph-break",),
        runtime=False,
        source=True,
        tolerance=1e-3,  # one graph instead of two: the backend may fuse (and round) differently
        settle_steps=3,  # every run compiles first
    ),
    FixKind(
        "framework-knobs",
        "a training framework's own setting changed where the script sets it "
        "(TrainingArguments(logging_nan_inf_filter=False), Lightning's "
        "Trainer(enable_progress_bar=False)): the host reads the framework makes every step, or "
        "Python it runs every step, removed by the framework; a setting that changes the "
        "training (precision, accumulation) only with --fix framework-knobs",
        ("sync-in-step", "framework-bound"),
        runtime=False,
        source=True,
        gpu_gain=True,  # the reads it removes wait for a GPU: on a CPU kept unless slower
    ),
    FixKind(
        "zero-grad",
        "optimizer.zero_grad(set_to_none=True) where it is set to False",
        (),
        runtime=False,
        source=True,
    ),
    FixKind(
        "cudnn-benchmark",
        "torch.backends.cudnn.benchmark = True for static input shapes",
        (),
        runtime=True,
        source=True,
        gpu_only=True,
    ),
    FixKind(
        "vectorize",
        "Python loops of tiny indexing ops rewritten as vectorized torch code, each rewrite "
        "checked on the inputs of the loop's first run",
        ("loop-indexing",),
        runtime=False,
        source=True,
        tolerance=1e-3,  # sums and vmapped ops may round differently; masks and gathers exact
    ),
    FixKind(
        "padding",
        "a per-sample loop over a ragged list batch as one padded batch with a masked loss "
        "(gpuopt.batching), checked on the recorded batch: same loss and gradients up to float "
        "rounding",
        ("ragged-batches",),
        runtime=False,
        source=True,
        tolerance=1e-3,  # batched matmuls and masked sums round differently
    ),
    FixKind(
        "cuda-graphs",
        "the whole training step (forward, backward, optimizer) captured in one CUDA graph and "
        "replayed (gpuopt.graphs.graphed_step: static inputs, capturable optimizers, warm-up on "
        "a side stream)",
        ("launch-bound",),
        runtime=False,
        source=True,
        gpu_only=True,
        gpu_gain=True,  # the rewritten step runs as written on a CPU: checked there, not timed
        expected="one graph launch a step instead of every kernel's: helps launch-bound steps "
        "most; GPU-only",
        tolerance=1e-3,  # capturable optimizers compute the bias correction on the device
        settle_steps=3,  # the warm-up steps before the capture, and the capture's own
    ),
    FixKind(
        "aot",
        "on a training script: the whole step captured in one CUDA graph (as cuda-graphs), the "
        "model's forward through Nimble's multi-stream plan where the cost model promises it",
        ("launch-bound",),
        runtime=False,
        source=True,
        gpu_only=True,
        gpu_gain=True,
        expected="Nimble's multi-stream plan of the model inside the captured step: its "
        "estimated gain is a model's, GPU-only",
        tolerance=1e-3,
        settle_steps=4,  # one more warm-up step: the first backward plans its graph
    ),
    FixKind(
        "amp",
        "the model's forward under bf16 autocast, its outputs back in float32 (no GradScaler "
        "needed with bf16; --amp-dtype fp16: fp16 autocast with the loss scaled)",
        (),
        runtime=True,
        source=False,
        opt_in=True,
        expected="tensor-core math: often 1.5-3x on compute-bound steps of recent GPUs; on a "
        "CPU only where it has bf16 units",
        tolerance=5e-2,
        transform="bf16_autocast",
    ),
    FixKind(
        "tf32",
        "TF32 matmuls and convolutions (torch.backends.cuda.matmul.allow_tf32 and "
        "torch.backends.cudnn.allow_tf32)",
        (),
        runtime=True,
        source=True,
        opt_in=True,
        gpu_only=True,
        expected="float32 matmuls on Ampere or newer up to several times faster; ~1e-3 relative "
        "error",
        tolerance=1e-2,
    ),
    FixKind(
        "channels-last",
        "the model's parameters in channels_last memory format (convolutional models)",
        (),
        runtime=True,
        source=True,
        opt_in=True,
        expected="convolutions with tensor cores avoid layout transposes: often 1.1-1.3x on a GPU",
        tolerance=1e-3,
        transform="channels_last",
    ),
    FixKind(
        "compile",
        "model.compile() (torch.compile in place: the module keeps its class and state_dict)",
        ("launch-bound",),
        runtime=True,
        source=True,
        opt_in=True,
        expected="fewer, fused kernels: helps launch-bound steps most; compiling takes seconds "
        "to minutes first, left out of its measure",
        tolerance=1e-3,
        settle_steps=3,
        transform="compile",
    ),
    FixKind(
        "padding-batch",
        "a batch-size-1 DataLoader of ragged samples as padded, length-bucketed batches of 16 "
        "with the loss masked (gpuopt.batching)",
        ("ragged-batches",),
        runtime=False,
        source=True,
        opt_in=True,
        expected="more samples per second: one padded batch instead of 16 single-sample steps; "
        "changes the optimisation (batch size, steps per epoch)",
        per_sample=True,
    ),
)

CATALOGUE += (
    FixKind(
        "fused-ops",
        "a hand-written GELU, softmax, layer norm or attention expression replaced by torch's "
        "one op (F.gelu, torch.softmax, F.layer_norm, F.scaled_dot_product_attention)",
        ("hand-written-op",),
        runtime=False,
        source=True,
        # one op instead of a chain rounds differently (float32 outputs agree to ~1e-6)
        tolerance=1e-3,
    ),
    FixKind(
        "batch-size",
        "the training DataLoader's batch_size raised to the one memory-headroom suggests (the "
        "GPU mostly empty, the step host-bound); the learning rate is left as it is",
        ("memory-headroom",),
        runtime=True,
        source=True,
        opt_in=True,
        expected="more samples per second where the step is launch- or dispatch-bound; changes "
        "the optimisation (batch size, steps per epoch, the learning rate's right value)",
        per_sample=True,
    ),
)

CATALOGUE += (
    FixKind(
        "accumulation",
        "gradient accumulation through the training framework's own setting "
        "(TrainingArguments(gradient_accumulation_steps=4), Lightning's "
        "Trainer(accumulate_grad_batches=4)): the optimizer steps every 4 batches",
        ("activation-memory",),
        runtime=False,
        source=True,
        opt_in=True,
        expected="a larger effective batch without its memory: with a smaller batch, the step's "
        "activations shrink; changes the optimisation (an optimizer step every N batches)",
        per_sample=True,
    ),
)

BY_NAME: dict[str, FixKind] = {k.name: k for k in CATALOGUE}
NAMES: tuple[str, ...] = tuple(BY_NAME)
