"""``--fix aot``: Nimble's plan for the script's own model, its CPU proof of equal outputs, and
the modelled gain over one stream — an estimate, never a measurement. The fix itself is the
whole step captured in one CUDA graph (:func:`gpuopt.fixes.whole_step.plan.plan_aot`); this
decides whether its forward goes through Nimble's multi-stream plan (:mod:`gpuopt.aot.choice`).

The script runs in a child process (``python -m gpuopt.fixes.whole_step.aot_check SPEC.json``) as
``python SCRIPT ARGS`` would, until its first ``optimizer.step()``. Meanwhile every outermost
module call (a module called from outside any other module) is noted with a copy of its inputs;
at that first step the model is the noted module holding most of the optimizer's parameters. It
is planned in ``eval()`` mode (Nimble's premise: a static graph; dropout would make two runs
differ), the plan is run on simulated streams in a random legal order with its checks
(:meth:`ScheduledModule.simulate`) and its outputs compared with the model's own, and the cost
model gives the estimated speedup on an H100. Then the process ends: the script never trains on.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpuopt.errors import GpuoptError
from gpuopt.script.child_process import child_main, run_child
from gpuopt.script.model_finder import OutermostCalls

DEVICE_PROFILE = "h100"


@dataclass
class AotSummary:
    model: str  # the model's class
    inputs: str  # the example inputs' shapes
    nodes: int
    streams: int
    syncs: int
    equal_outputs: bool  # the simulated plan's outputs equal the model's own
    max_abs_diff: float | None
    checks_passed: bool  # the simulation's vector-clock checks
    est_speedup: float  # multi-stream over eager, modelled
    est_over_graph: float  # multi-stream over a single-stream CUDA graph, modelled
    profile: str = DEVICE_PROFILE

    def says(self) -> str:
        proof = "equal outputs" if self.equal_outputs and self.checks_passed else "NOT proven"
        return (
            f"{self.model}({self.inputs}): {self.nodes} nodes on {self.streams} streams with "
            f"{self.syncs} syncs; CPU proof: {proof} (max |diff| {self.max_abs_diff}); "
            f"estimated {self.est_speedup:.2f}x over eager ({self.est_over_graph:.2f}x over a "
            f"one-stream CUDA graph) on the {self.profile} cost model — an estimate, GPU-only, "
            "not measured here"
        )


class _Done(BaseException):
    """Raised once the analysis is written: ends the script."""


def _shapes(args: tuple[Any, ...]) -> str:
    import torch

    return ", ".join(
        "x".join(str(d) for d in a.shape) if isinstance(a, torch.Tensor) else type(a).__name__
        for a in args
    )


def analyse(model: Any, inputs: tuple[Any, ...]) -> AotSummary:
    """Plan, prove and estimate ``model`` on ``inputs`` (in eval mode, then restored)."""
    import torch

    from gpuopt.aot.api import max_abs_diff, schedule

    was_training = model.training
    model.eval()
    try:
        # Nimble's own plan (streams="multi"): its estimate is what the fix weighs
        scheduled = schedule(model, inputs, cuda_graph=False, streams="multi")
        report = scheduled.simulate(*inputs, seed=0)
        with torch.no_grad():
            eager = model(*inputs)
        diff = max_abs_diff(report.outputs, eager)
        est = scheduled.estimate(DEVICE_PROFILE)
        plan = scheduled.plan
    finally:
        model.train(was_training)
    return AotSummary(
        model=type(model).__name__,
        inputs=_shapes(inputs),
        nodes=len(plan.order),
        streams=int(plan.num_streams),
        syncs=len(plan.syncs),
        equal_outputs=diff is not None and diff <= 1e-5,
        max_abs_diff=diff,
        checks_passed=bool(report.ok),
        est_speedup=round(float(est.speedup_multistream), 3),
        est_over_graph=round(float(est.multistream_over_graph), 3),
    )


class _Watch:
    """The script's outermost module calls, and its first optimizer step."""

    def __init__(self, out_file: Path) -> None:
        self.out_file = out_file
        self.calls = OutermostCalls(keep_inputs=True)

    def stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        found = self.calls.model_for(optimizer)
        if found is None:
            raise GpuoptError("no module call holds the optimizer's parameters")
        summary = analyse(*found)
        self.out_file.write_text(json.dumps(asdict(summary), indent=2))
        raise _Done()


def _child(spec: dict[str, Any]) -> int:
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from gpuopt.script.target import Target, run_target

    watch = _Watch(Path(spec["out"]))
    watch.calls.install()
    register_optimizer_step_post_hook(watch.stepped)
    try:
        outcome = run_target(Target(spec["script"], None, list(spec["args"])))
    except _Done:
        return 0
    except GpuoptError as exc:
        print(f"gpuopt aot: {exc}", file=sys.stderr)
        return 3
    if Path(spec["out"]).exists():
        return 0
    why = outcome.error.message if outcome.error is not None else "no optimizer step"
    print(f"gpuopt aot: the script ended before its first optimizer step ({why})", file=sys.stderr)
    return 3


def run_aot_check(
    script: str, args: list[str], out_file: Path, timeout_s: float = 300.0
) -> AotSummary:
    """Run the analysis in a child process; a one-line :class:`GpuoptError` when it cannot."""
    spec = {"script": script, "args": args}
    raw = run_child(
        "gpuopt.fixes.whole_step.aot_check", spec, out_file, timeout_s, "the AoT analysis"
    )
    return AotSummary(**raw)


if __name__ == "__main__":
    child_main(sys.argv[1:], _child)
