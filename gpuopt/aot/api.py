"""``gpuopt.aot.schedule``: capture a static model, plan its streams, return a module that runs it.

The returned :class:`ScheduledModule` has the same outputs as the model on inputs shaped like
the example inputs, and carries ``.plan`` (plain data, :class:`gpuopt.aot.plan.Plan`). Where it
runs:

* CUDA inputs: the plan on dedicated streams, captured into one CUDA graph after warm-up
  (:mod:`gpuopt.aot.executor_cuda`);
* CPU inputs: the plan's launch order (:func:`gpuopt.aot.executor_cpu.run_sequential`); CPU
  has no streams, so there is no speedup, only the same results;
* ``.simulate(*inputs, seed=...)``: the plan on simulated streams in a random legal order with
  vector-clock checks (:class:`gpuopt.aot.executor_cpu.StreamSimulator`), the proof without a GPU;
* ``.estimate(profile)``: the modelled eager / single-stream-graph / multi-stream times.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpuopt import torch_compat
from gpuopt.aot.capture import CaptureError, Program, capture_program
from gpuopt.aot.executor_cpu import MemoryModel, SimReport, run_sequential, run_simulated
from gpuopt.aot.plan import Plan
from gpuopt.aot.planner import buffers_restored, plan_program

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from gpuopt.aot.simulate import Estimate


def as_input_tuple(example_inputs: Any) -> tuple[Any, ...]:
    """Example inputs as a positional-argument tuple (a lone tensor becomes a 1-tuple)."""
    if isinstance(example_inputs, tuple):
        return example_inputs
    if isinstance(example_inputs, list):
        return tuple(example_inputs)
    return (example_inputs,)


def max_abs_diff(a: Any, b: Any) -> float | None:
    """Largest absolute difference between two output structures (None: not comparable)."""
    import torch

    pytree = torch_compat.pytree()
    la, sa = pytree.tree_flatten(a)
    lb, sb = pytree.tree_flatten(b)
    if len(la) != len(lb):
        return None
    worst = 0.0
    for x, y in zip(la, lb, strict=True):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape:
                return None
            if x.numel():
                worst = max(worst, float((x.detach().double() - y.detach().double()).abs().max()))
        elif x != y:
            return None
    return worst


def _module_class() -> type:
    import torch

    class _ScheduledModule(torch.nn.Module):
        """A static model planned for multi-stream execution (see the module docstring)."""

        def __init__(
            self,
            program: Program,
            plan: Plan,
            *,
            cuda_graph: bool = True,
            warmup: int = 2,
            multi_stream_plan: Plan | None = None,
        ) -> None:
            super().__init__()
            self.graph_module = program.gm
            self.plan = plan  # the plan it runs: multi-stream or one stream (plan.choice)
            self.multi_stream_plan = multi_stream_plan or plan  # Nimble's assignment, as planned
            self.cuda_graph = cuda_graph
            self.warmup = warmup
            self.program = program
            self._runners: dict[Any, Any] = {}

        def _leaves(self, args: Sequence[Any]) -> list[Any]:
            leaves = self.program.flatten_inputs(args)
            self.program.check_static(leaves)
            return leaves

        def forward(self, *args: Any) -> Any:
            leaves = self._leaves(args)
            device = next(
                (x.device for x in leaves if isinstance(x, torch.Tensor)), torch.device("cpu")
            )
            with torch.no_grad():
                if device.type == "cuda":
                    return self._cuda_runner(device)(leaves)
                return run_sequential(self.program, self.plan, leaves)

        def _cuda_runner(self, device: torch.device) -> Any:
            from gpuopt.aot.executor_cuda import CudaPlanRunner

            key = (str(device), self.cuda_graph)
            if key not in self._runners:
                self._runners[key] = CudaPlanRunner(
                    self.program, self.plan, device, use_graph=self.cuda_graph, warmup=self.warmup
                )
            return self._runners[key]

        def memory_model(self) -> MemoryModel:
            """The measured storage accesses the simulator checks the plan against."""
            return MemoryModel.from_plan_ops(self.plan, self.plan.memory)

        def simulate(self, *args: Any, seed: int = 0, plan: Plan | None = None) -> SimReport:
            """Run on simulated streams in a random legal order (vector-clock checked).

            ``plan`` replaces this module's plan (to check a modified one against the same
            measured accesses).
            """
            leaves = self._leaves(args)
            with torch.no_grad():
                return run_simulated(
                    self.program, plan or self.plan, self.memory_model(), leaves, seed
                )

        def estimate(self, profile: str = "h100") -> Estimate:
            """Modelled times for ``profile``: an estimate, never a measurement."""
            from gpuopt.aot.costmodel import get_profile
            from gpuopt.aot.simulate import estimate

            return estimate(self.plan, get_profile(profile))

    _ScheduledModule.__name__ = "ScheduledModule"
    _ScheduledModule.__qualname__ = "ScheduledModule"
    return _ScheduledModule


_CLASS: type | None = None


def scheduled_module_class() -> type:
    """The ScheduledModule class (an ``nn.Module``; defined lazily so importing this module
    does not import torch)."""
    global _CLASS
    if _CLASS is None:
        _CLASS = _module_class()
    return _CLASS


STREAMS = ("auto", "multi", "one")


def schedule(
    model: torch.nn.Module,
    example_inputs: Any,
    *,
    merge: bool = True,
    cuda_graph: bool = True,
    warmup: int = 2,
    check: bool = True,
    capture: str = "auto",
    training: bool = False,
    streams: str = "auto",
    device_profile: str = "h100",
) -> Any:
    """Plan ``model`` for ahead-of-time multi-stream execution; returns a ScheduledModule.

    ``example_inputs``: a tuple of positional arguments (a lone tensor is accepted). The model
    must be static: the same operators and shapes on every call (Nimble's premise); the returned
    module refuses inputs of other shapes. Capture runs the model's graph once on the inputs
    (on their device). Put the model in ``eval()`` mode for inference: in training mode buffer
    updates (e.g. BatchNorm statistics) are serialized. With ``check`` the captured graph's
    outputs are compared with ``model(*example_inputs)`` and the largest difference is kept in
    ``plan.stats["capture_max_abs_diff"]``. ``capture``: "auto" (torch.export, else torch.fx),
    "export" or "fx". ``training=True``: Nimble's training mode (AOTAutograd forward graph on
    multiple streams, backward graph on one; :mod:`gpuopt.aot.training`). ``merge=False`` keeps
    one stream per chain (Nimble before merging); ``cuda_graph=False`` runs the streams without
    graph capture (the operators issued from Python one by one: slower than eager on small
    kernels, never chosen for you); ``warmup`` runs precede capture.

    ``streams``: "auto" hands back the multi-stream plan only where it beats the one-stream
    graph of the same model — measured on the device when the inputs are on CUDA and graphs are
    used, else by the cost model of ``device_profile`` with a margin — and the one-stream plan
    otherwise (:mod:`gpuopt.aot.choice`; ``plan.choice`` says which and how); "multi" and "one"
    ask for one. ``.multi_stream_plan`` is Nimble's assignment either way.
    """
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"gpuopt.aot.schedule needs a torch.nn.Module, got {type(model).__name__}")
    if streams not in STREAMS:
        raise ValueError(f"streams must be one of {', '.join(STREAMS)}, not {streams!r}")
    inputs = as_input_tuple(example_inputs)
    if training:
        from gpuopt.aot.training import schedule_training

        try:
            return schedule_training(
                model,
                inputs,
                merge=merge,
                cuda_graph=cuda_graph,
                warmup=warmup,
                streams=streams,
                device_profile=device_profile,
            )
        except CaptureError:
            raise
        except Exception as exc:  # noqa: BLE001 - AOTAutograd could not trace the model
            raise CaptureError(
                f"cannot capture the model for training: {type(exc).__name__}: {exc}"
            ) from None
    program, notes = capture_program(model, inputs, capture)
    leaves = program.flatten_inputs(inputs)
    # The probe (and the check) run the model once; put its buffers (e.g. BatchNorm running
    # statistics in training mode) back afterwards, so scheduling has no side effect.
    with buffers_restored(model):
        try:
            plan, graph_outputs = plan_program(program, leaves, merge=merge)
        except CaptureError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure to run the captured graph
            raise CaptureError(
                "the captured graph does not run on the example inputs: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        plan.notes[:0] = notes
        if check:
            with torch.no_grad():
                eager = model(*inputs)
            plan.stats["capture_max_abs_diff"] = max_abs_diff(graph_outputs, eager)
    from gpuopt.aot.choice import choose_plan

    module_class = scheduled_module_class()
    chosen, runner = choose_plan(
        program, plan, leaves, streams=streams, cuda_graph=cuda_graph, warmup=warmup,
        device_profile=device_profile,
    )  # fmt: skip
    module = module_class(
        program, chosen, cuda_graph=cuda_graph, warmup=warmup, multi_stream_plan=plan
    )
    if runner is not None:  # measured on the device: the chosen graph is already captured
        module._runners[(str(runner.device), cuda_graph)] = runner
    return module
