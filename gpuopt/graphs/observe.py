"""What one eager run of a training step does below Python: every ATen operator it dispatches
(forward, backward and the optimizer's), with its tensors' shapes, dtypes and devices, the
Python numbers it takes, the values of CPU scalar tensors, an explicit ``torch.Generator``, and
where in the user's code it was called from; and whether the step drew numbers from Python's,
numpy's or torch's CPU generators.

A CUDA graph replays the kernels the captured run launched and nothing else, so this is what
decides whether a step can be captured (:mod:`gpuopt.graphs.verdict`): a host read of a device
value, CPU work, a number or a shape that changes from step to step, a random draw on the host.
The observer is a ``TorchDispatchMode`` pushed for a few warm-up steps only; it works the same on
CPU tensors and on fake CUDA tensors (``FakeTensorMode``), which is how it is tested.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gpuopt import torch_compat

# ops whose output size is read from the device (a sync, and a shape a replay cannot change)
from gpuopt.debug import logger

log = logger(__name__)

DATA_DEPENDENT = (
    "aten.nonzero",
    "aten.masked_select",
    "aten.unique",
    "aten._unique",
    "aten._unique2",
    "aten.unique_consecutive",
    "aten.unique_dim",
    "aten.repeat_interleave",
    "aten.bincount",
    "aten.histc",
    "aten.argwhere",
)
_SKIP_DIRS = (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),  # gpuopt/
)


@dataclass(frozen=True)
class TensorMeta:
    shape: tuple[int, ...]
    dtype: str
    device: str  # "cuda", "cpu", "meta"
    value: float | None = None  # a CPU scalar's value (reading it is free: no device involved)


@dataclass(frozen=True)
class OpRecord:
    """One dispatched operator."""

    name: str  # "aten.convolution.default"
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]
    scalars: tuple[Any, ...] = ()  # the Python numbers and bools among its arguments
    returns_scalar: bool = False  # a Python number or bool came back: the host read a value
    generator: bool = False  # an explicit torch.Generator argument
    site: str = ""  # "train.py:42": the innermost user frame that called it

    @property
    def packet(self) -> str:
        """``aten.add`` for ``aten.add.Tensor``."""
        return self.name.rsplit(".", 1)[0] if self.name.count(".") >= 2 else self.name

    def key(self) -> tuple[Any, ...]:
        """What must be the same in every step for one graph to replay it."""
        return (self.name, self.inputs, self.outputs, self.scalars)


@dataclass
class StepRecord:
    """Everything one observed step dispatched, and the host generators it moved."""

    ops: list[OpRecord] = field(default_factory=list)
    host_rng: list[str] = field(default_factory=list)  # "random", "numpy", "torch (CPU)"
    paused: int = 0  # > 0: operators run unrecorded (an optimizer trusted to be capturable)


def _meta(t: Any, host_values: bool) -> TensorMeta:
    device = t.device.type
    value = None
    if host_values and device == "cpu" and t.dim() == 0 and not _is_fake(t):
        try:
            value = float(t.item())
        except (RuntimeError, TypeError, ValueError) as exc:
            log.debug_once("a scalar's value not read: %s", exc)
            value = None
    return TensorMeta(
        tuple(int(d) for d in t.shape), str(t.dtype).replace("torch.", ""), device, value
    )


def _is_fake(t: Any) -> bool:
    from gpuopt.torch_compat import FakeTensor

    return isinstance(t, FakeTensor)


def _flat(value: Any) -> list[Any]:
    return list(torch_compat.pytree().tree_leaves(value))


def user_site(skip: tuple[str, ...] = ()) -> str:
    """``file.py:line`` of the innermost frame outside torch and gpuopt (``""``: none)."""
    import torch

    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    dirs = (torch_dir, *_SKIP_DIRS, *skip)
    f: Any = sys._getframe(1)
    while f is not None:
        path = os.path.abspath(f.f_code.co_filename)
        if not path.startswith(dirs) and not path.startswith("<"):
            return f"{os.path.basename(path)}:{f.f_lineno}"
        f = f.f_back
    return ""


def op_record(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, device: str = "cuda"
) -> OpRecord:
    """The record of one call ``func(*args, **kwargs) -> out`` (the site is filled in later,
    only for the operators a verdict names). In a step on a device, the values of CPU scalar
    tensors are host numbers (a step count) and are kept; in a CPU step they are data."""
    import torch

    host = device != "cpu"
    leaves = _flat((args, kwargs))
    tensors = tuple(_meta(t, host) for t in leaves if isinstance(t, torch.Tensor))
    scalars = tuple(x for x in leaves if isinstance(x, (bool, int, float)))
    outs = _flat(out)
    return OpRecord(
        name=str(func),
        inputs=tensors,
        outputs=tuple(_meta(t, host) for t in outs if isinstance(t, torch.Tensor)),
        scalars=scalars,
        returns_scalar=any(isinstance(x, (bool, int, float)) for x in outs),
        generator=any(isinstance(x, torch.Generator) for x in leaves),
    )


def _host_rng_state() -> dict[str, Any]:
    import torch

    state: dict[str, Any] = {"random": random.getstate(), "torch (CPU)": torch.get_rng_state()}
    np = sys.modules.get("numpy")
    if np is not None:
        state["numpy"] = np.random.get_state()
    return state


def _moved(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    import torch

    out = []
    if before["random"] != after["random"]:
        out.append("random")
    if not torch.equal(before["torch (CPU)"], after["torch (CPU)"]):
        out.append("torch (CPU)")
    if "numpy" in before and "numpy" in after:
        a, b = before["numpy"], after["numpy"]
        np = sys.modules["numpy"]
        if not (np.array_equal(a[1], b[1]) and a[2:] == b[2:]):
            out.append("numpy")
    return out


@contextmanager
def observed(record: StepRecord, device: str) -> Iterator[None]:
    """Run the block under an observing ``TorchDispatchMode``; its operators and the host
    generators it moved go into ``record``. ``device``: the step's ("cuda", or "cpu" where the
    analysis runs on a machine without a GPU)."""
    from gpuopt.torch_compat import TorchDispatchMode

    class _Observe(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch: unannotated
        def __torch_dispatch__(
            self,
            func: Any,
            types: Any,
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if record.paused:
                return out
            rec = op_record(func, args, kwargs, out, device)
            if needs_site(rec, device):
                rec = OpRecord(**{**rec.__dict__, "site": user_site()})
            record.ops.append(rec)
            return out

    before = _host_rng_state()
    with _Observe():  # type: ignore[no-untyped-call]
        yield
    record.host_rng = _moved(before, _host_rng_state())


def needs_site(rec: OpRecord, device: str) -> bool:
    """Whether an operator may be named in a refusal (only those get a source line: walking
    the stack for every operator would make the observed steps much slower)."""
    if rec.returns_scalar or rec.generator or rec.packet in DATA_DEPENDENT:
        return True
    return device != "cpu" and any(t.device == "cpu" for t in (*rec.inputs, *rec.outputs))


__all__ = [
    "DATA_DEPENDENT",
    "OpRecord",
    "StepRecord",
    "TensorMeta",
    "needs_site",
    "observed",
    "op_record",
    "user_site",
]
