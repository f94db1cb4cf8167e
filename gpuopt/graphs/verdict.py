"""Can a training step be captured whole in one CUDA graph? Pure functions over what eager
warm-up steps did (:mod:`gpuopt.graphs.observe`) and over the step's optimizers.

A graph replays the kernels one captured step launched, with the shapes, the Python numbers and
the addresses of that step. What breaks that, and so refuses the capture, with the operator and
the user's line where one is known:

* a **host read** of a device value (``.item()``, ``float(t)``, ``if t:``, ``print(t)``): the
  capture itself fails there (a sync is not allowed while a stream captures);
* an operator whose **output size is read from the device** (``nonzero``, ``masked_select``,
  ``unique``...): the same, and its shape would change from step to step;
* an explicit ``torch.Generator``: a replay would not advance it;
* a draw from Python's ``random``, numpy or torch's CPU generator inside the step: the host code
  runs once, at capture, and every replay repeats that draw;
* **CPU work** in a CUDA step, or a copy between host and device inside it: not replayed (move
  the copy before the step);
* two steps that **differ**: other operators (data-dependent control flow), other shapes, or
  other Python numbers (a step counter or learning rate computed on the host, as optimizers
  without ``capturable=True`` do): a replay would repeat the captured one;
* an optimizer with no capturable mode (``LBFGS``, ``SparseAdam``, ``Adagrad``, ``Adafactor``).

What it cannot see: Python side effects that are not random draws (a counter in the model's
``forward``, a list it appends to) run once at capture. The codemod refuses those it can see in
the step's own statements (:mod:`gpuopt.fixes.whole_step.codemod`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuopt.graphs.observe import DATA_DEPENDENT, OpRecord, StepRecord, TensorMeta

# torch.optim classes without a capturable mode, and why each cannot be captured
NOT_CAPTURABLE = {
    "LBFGS": "steps with a closure that re-evaluates the loss and reads it on the host",
    "SparseAdam": "updates sparse gradients, whose sizes change from step to step",
    "Adagrad": "has no capturable mode: its step count lives on the host",
    "Adafactor": "has no capturable mode: its step count lives on the host",
}


@dataclass(frozen=True)
class Refusal:
    reason: str
    site: str = ""

    def says(self) -> str:
        return f"{self.site}: {self.reason}" if self.site else self.reason


def _at(rec: OpRecord) -> str:
    return f" at {rec.site}" if rec.site else ""


def _first(records: Sequence[StepRecord], test: Any) -> OpRecord | None:
    for r in records:
        for op in r.ops:
            if test(op):
                return op
    return None


def _cpu_work(op: OpRecord) -> bool:
    """CPU tensors beyond scalar constants, or a copy between host and device."""
    ins = {t.device for t in op.inputs}
    outs = {t.device for t in op.outputs}
    if "cpu" in ins | outs and len(ins | outs) > 1 and "copy" in op.name:
        return True
    return any(
        t.device == "cpu" and (t.shape or t.value is None) for t in (*op.inputs, *op.outputs)
    )


def _host_reads(records: Sequence[StepRecord], device: str) -> list[Refusal]:
    """A value read from the device (in a CPU step: what would be one on a GPU). Reading a
    CPU tensor in a device step is host state, judged by the changes between steps."""
    out = []
    read = _first(
        records,
        lambda op: (
            op.returns_scalar and (device == "cpu" or any(t.device != "cpu" for t in op.inputs))
        ),
    )
    if read is not None:
        out.append(
            Refusal(
                f"the step reads a device value on the host (`{read.packet}`{_at(read)}: "
                "`.item()`, `float(t)`, `if t:` or `print(t)`); a capture cannot wait for the "
                "device: move the read after the step",
                read.site,
            )
        )
    sized = _first(records, lambda op: op.packet in DATA_DEPENDENT)
    if sized is not None:
        out.append(
            Refusal(
                f"`{sized.packet}`{_at(sized)} sizes its output from the data: a read of the "
                "device, and a shape one graph cannot change",
                sized.site,
            )
        )
    return out


def _host_work(records: Sequence[StepRecord], device: str) -> list[Refusal]:
    out = []
    gen = _first(records, lambda op: op.generator)
    if gen is not None:
        out.append(
            Refusal(
                f"`{gen.packet}`{_at(gen)} draws from an explicit torch.Generator: a replay "
                "would not advance it (use the default generator)",
                gen.site,
            )
        )
    moved = sorted({g for r in records for g in r.host_rng if not (device == "cpu" and "CPU" in g)})
    if moved:
        out.append(
            Refusal(
                f"the step draws random numbers on the host ({', '.join(moved)}): that code runs "
                "once, at capture, and every replay would repeat its draw"
            )
        )
    if device != "cpu":
        cpu = _first(records, _cpu_work)
        if cpu is not None:
            what = "a copy between host and device" if "copy" in cpu.name else "CPU work"
            out.append(
                Refusal(
                    f"{what} inside the step (`{cpu.packet}`{_at(cpu)}): a graph replays only "
                    "the device's work; move it before the step",
                    cpu.site,
                )
            )
    return out


def _meta_text(ts: tuple[TensorMeta, ...]) -> str:
    return ", ".join(
        (f"{t.value:g}" if t.value is not None else "x".join(map(str, t.shape)) or "scalar")
        for t in ts
    )


def _shapes(ts: tuple[TensorMeta, ...]) -> list[tuple[tuple[int, ...], str, str]]:
    return [(t.shape, t.dtype, t.device) for t in ts]


def _difference(a: StepRecord, b: StepRecord) -> Refusal | None:
    """How the second step differs from the first, if it does."""
    for k, (x, y) in enumerate(zip(a.ops, b.ops, strict=False)):
        if x.key() == y.key():
            continue
        site = y.site or x.site
        at = f" at {site}" if site else ""
        if x.name != y.name:
            return Refusal(
                f"two steps ran other operators (operator {k + 1}: `{x.packet}` then "
                f"`{y.packet}`{at}): control flow that depends on the data or the step; one "
                "graph replays one path",
                site,
            )
        for side in ("inputs", "outputs"):
            tx, ty = getattr(x, side), getattr(y, side)
            if _shapes(tx) != _shapes(ty):
                return Refusal(
                    f"shapes changed between steps (`{x.packet}`{at}, {side}: "
                    f"{_meta_text(tx)} then {_meta_text(ty)}): one graph replays one shape",
                    site,
                )
        if x.scalars != y.scalars:
            before, after = str(list(x.scalars)), str(list(y.scalars))
        else:
            before, after = _meta_text(x.inputs + x.outputs), _meta_text(y.inputs + y.outputs)
        return Refusal(
            f"a number computed on the host changed between steps (`{x.packet}`{at}: "
            f"{before} then {after}): a step counter or a learning rate kept on the host; a "
            "replay would keep the captured one",
            site,
        )
    if len(a.ops) != len(b.ops):
        return Refusal(
            f"two steps dispatched {len(a.ops)} and {len(b.ops)} operators: control flow that "
            "depends on the data or the step"
        )
    return None


def step_refusals(records: Sequence[StepRecord], device: str) -> list[Refusal]:
    """Why the observed steps cannot be captured in one graph (empty: they can). ``records``:
    consecutive warm-up steps after the first (which creates the optimizer's state)."""
    out = _host_reads(records, device) + _host_work(records, device)
    for a, b in zip(records, records[1:], strict=False):
        diff = _difference(a, b)
        if diff is not None:
            out.append(diff)
            break
    return out


def optimizer_refusals(optimizers: Sequence[Any]) -> list[Refusal]:
    """torch.optim classes without a capturable mode (custom optimizers are judged by what
    their steps dispatch)."""
    out = []
    for opt in optimizers:
        name = type(opt).__name__
        if type(opt).__module__.startswith("torch.optim") and name in NOT_CAPTURABLE:
            out.append(Refusal(f"the optimizer {name} {NOT_CAPTURABLE[name]}"))
    return out


__all__ = ["NOT_CAPTURABLE", "Refusal", "optimizer_refusals", "step_refusals"]
