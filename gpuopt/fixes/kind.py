"""What a fix is, as ``gpuopt optimize`` knows it: its name (the contract's ``--fix NAME``), what
it changes, the findings that call for it, and how it can reach a run. Each fix declares its own
next to its plan; :mod:`gpuopt.fixes.catalogue` lists them."""

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
    # judged by the memory it frees (the step's peak before and after,
    # gpuopt.optimize.measure.memory), its samples/s a cost: never dropped for being slower
    judged_by_memory: bool = False
    # plans its framework's settings itself (several set together), not through the one knob
    # gpuopt.fixes.plan sets for an opt-in fix
    own_framework_form: bool = False


__all__ = ["FixKind"]
