"""The whole-step fixes' plans: ``cuda-graphs`` and ``aot``, each the training step captured whole
in one CUDA graph by the cuda-graphs codemod (:mod:`gpuopt.fixes.whole_step.codemod`); ``aot``
with the model's forward through Nimble's multi-stream plan where the cost model promises enough
and the plan's CPU proof (:mod:`gpuopt.fixes.whole_step.aot_check`) passed."""

from __future__ import annotations

from gpuopt.fixes.kind import FixKind
from gpuopt.fixes.planned import PlanInput, PlannedFix, SourceEdit, findings_named
from gpuopt.source import Rewrite

CUDA_GRAPHS = FixKind(
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
)

AOT = FixKind(
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
)


def _whole_step(
    kind: FixKind, inp: PlanInput, forward: str | None = None
) -> tuple[PlannedFix, str | None]:
    """The cuda-graphs codemod on the script: the fix with its edit and notes, or why not."""
    from gpuopt.fixes.whole_step.codemod import rewrite_cuda_graphs
    from gpuopt.source import CodemodError

    found = [f.id for f in findings_named(inp.profile, kind.findings)]
    fix = PlannedFix(kind, False, False, "", findings=found)
    if inp.script_text is None or inp.script_path is None:
        return fix, "the training loop is read from a script, not from -m MODULE, so far"
    path = inp.script_path
    try:
        r = rewrite_cuda_graphs(inp.script_text, name=path, forward=forward)
    except CodemodError as exc:
        return fix, str(exc)
    fix.skipped = [f"{path}:{s.line}: {s.reason}" for s in r.skipped]
    if not r.changed:
        return fix, (
            "no training step of the script can be captured: see what was left alone"
            if r.skipped
            else "no training loop in the script (a backward and an optimizer step in a loop)"
        )
    fix.sites = [f"{path}:{n.split(':')[0].split()[-1]}" for n in r.notes]

    def codemod(text: str, name: str) -> Rewrite:
        return rewrite_cuda_graphs(text, name=name, forward=forward)

    fix.edits = [SourceEdit(path, [], codemod)]
    fix.applicable = True
    return fix, None


def _where(inp: PlanInput) -> str:
    return (
        "the runs measure it on this GPU"
        if inp.cuda
        else "GPU-only: without a CUDA device the rewritten step runs as written, so the runs "
        "check that the training is the same; its gain is a GPU's, not measured here"
    )


def plan_cuda_graphs(kind: FixKind, inp: PlanInput) -> PlannedFix:
    """``cuda-graphs``: the training step captured whole (a source fix); on a machine without
    a GPU only when named (then the runs prove the rewrite trains the same)."""
    fix, why = _whole_step(kind, inp)
    if why is not None:
        fix.reason = why
        return fix
    fix.reason = f"the whole training step captured in one CUDA graph; {_where(inp)}"
    if not inp.cuda and kind.name not in inp.chosen:
        fix.applicable = False
        fix.reason = (
            "GPU-only: this run had no CUDA device; the step can be captured (ask with "
            "--fix cuda-graphs to check the rewrite here)"
        )
    return fix


def plan_aot(kind: FixKind, inp: PlanInput) -> PlannedFix:
    """``--fix aot`` on a training script: the whole step captured in one CUDA graph (the
    cuda-graphs rewrite), the model's forward through Nimble's multi-stream plan where the cost
    model promises enough over one stream and the plan's CPU proof passed. Per-part graphs (a
    copy of every parameter and saved activation a step, the backward's capture in the measured
    steps) are 7.5x slower on an H200 (docs/optimize.md): where the step cannot be captured
    whole, it is not offered, with the reason."""
    from gpuopt.aot.choice import MIN_ESTIMATED_GAIN

    if "aot" not in inp.chosen:
        return PlannedFix(
            kind,
            False,
            False,
            "ask for it with --fix aot (it captures the step); see gpuopt schedule",
        )
    summary = inp.aot
    nimble = (
        summary is not None
        and summary.equal_outputs
        and summary.checks_passed
        and summary.est_over_graph >= MIN_ESTIMATED_GAIN
    )
    fix, why = _whole_step(kind, inp, "aot" if nimble else None)
    says = summary.says() if summary is not None else f"no AoT plan: {inp.aot_error or 'not run'}"
    if why is not None:
        fix.reason = (
            f"not offered for training: the AoT fix on a training script is the whole step "
            f"captured in one CUDA graph, and {why[0].lower()}{why[1:]} ({says})"
        )
        return fix
    if nimble:
        forward = "its forward through Nimble's multi-stream plan"
    elif summary is not None and summary.equal_outputs and summary.checks_passed:
        forward = (
            f"its forward captured as the model runs it (Nimble's plan is estimated "
            f"{summary.est_over_graph:.2f}x over one stream, below the {MIN_ESTIMATED_GAIN}x "
            "the cost model must promise)"
        )
    else:
        forward = "its forward captured as the model runs it (Nimble's plan not proven)"
    fix.reason = f"the whole training step captured in one CUDA graph, {forward}; {_where(inp)}"
    fix.notes.append(says)
    if summary is not None:
        fix.settings = {"streams": summary.streams, "est_over_graph": summary.est_over_graph}
    return fix


__all__ = [
    "AOT",
    "CUDA_GRAPHS",
    "plan_aot",
    "plan_cuda_graphs",
]
