"""Training as in Nimble: the forward graph on multiple streams, the backward graph on one.

AOTAutograd (``torch._functorch.aot_autograd.aot_module``, the partitioner behind
``torch.compile``) splits the model into a functional forward graph (which also returns the
activations the backward needs and the new values of mutated buffers) and a backward graph, and
wraps them in one ``autograd.Function``. We give it two "compilers" that plan each graph the
first time it runs with real tensors: the forward with Nimble's stream assignment, the backward
as a single stream. On CPU both run in plan order; on CUDA each runs through
:class:`gpuopt.aot.executor_cuda.CudaPlanRunner` (captured into its own CUDA graph).

``torch._functorch`` is a private PyTorch API; it is reached through :mod:`gpuopt.torch_compat`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpuopt import torch_compat
from gpuopt.aot.capture import program_from_graph_module
from gpuopt.aot.executor_cpu import MemoryModel, SimReport, run_sequential, run_simulated
from gpuopt.aot.plan import Plan
from gpuopt.aot.planner import buffers_restored, plan_program

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from gpuopt.aot.simulate import Estimate


def single_stream(plan: Plan) -> Plan:
    """The same plan with every node on the origin stream: no syncs, no fork or join."""
    return plan.one_stream(
        "single stream (Nimble's training mode runs the backward graph on one stream)"
    )


class GraphPart:
    """One AOTAutograd graph (forward or backward), planned at its first real call."""

    def __init__(
        self,
        gm: Any,
        role: str,
        *,
        merge: bool,
        cuda_graph: bool,
        warmup: int,
        streams: str = "auto",
        device_profile: str = "h100",
    ) -> None:
        self.gm = gm
        self.role = role
        self.merge = merge
        self.cuda_graph = cuda_graph
        self.warmup = warmup
        self.streams = streams
        self.device_profile = device_profile
        self.program: Any = None
        self.plan: Plan | None = None
        self.example: list[Any] = []
        self._runners: dict[str, Any] = {}

    def _prepare(self, args: Sequence[Any]) -> None:
        import torch

        self.program = program_from_graph_module(self.gm, f"aot-{self.role}", list(args))
        self.program.method = "aot_autograd"
        plan, _ = plan_program(self.program, list(args), merge=self.merge)
        if self.role == "backward":
            plan = single_stream(plan)
        else:  # multi-stream only where the cost model promises enough (gpuopt.aot.choice)
            from gpuopt.aot.choice import choose_plan

            plan, _ = choose_plan(
                self.program, plan, list(args), streams=self.streams, cuda_graph=False,
                warmup=self.warmup, device_profile=self.device_profile,
            )  # fmt: skip
        self.plan = plan
        self.example = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]

    def __call__(self, *args: Any) -> Any:
        import torch

        if self.plan is None:
            self._prepare(args)
        assert self.plan is not None
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
        if device.type == "cuda":
            from gpuopt.aot.executor_cuda import CudaPlanRunner

            key = str(device)
            if key not in self._runners:
                self._runners[key] = CudaPlanRunner(
                    self.program, self.plan, device, use_graph=self.cuda_graph, warmup=self.warmup
                )
            return self._runners[key](list(args))
        return run_sequential(self.program, self.plan, list(args))

    def simulate(self, seed: int = 0, plan: Plan | None = None) -> SimReport:
        """The vector-clock simulator on this graph, with the arguments of its first call."""
        import torch

        if self.plan is None:
            raise RuntimeError(f"the {self.role} graph has not run yet")
        memory = MemoryModel.from_plan_ops(self.plan, self.plan.memory)
        with torch.no_grad():
            return run_simulated(self.program, plan or self.plan, memory, self.example, seed)


def schedule_training(
    model: torch.nn.Module,
    inputs: tuple[Any, ...],
    *,
    merge: bool,
    cuda_graph: bool,
    warmup: int,
    streams: str = "auto",
    device_profile: str = "h100",
) -> Any:
    """A module whose forward runs multi-stream and whose backward runs single-stream."""
    import torch
    from functorch.compile import make_boxed_func

    aot_module = torch_compat.aot_module()

    parts: dict[str, GraphPart] = {}

    def compiler(role: str) -> Any:
        def compile_graph(gm: Any, _example: Any) -> Any:
            part = GraphPart(
                gm, role, merge=merge, cuda_graph=cuda_graph, warmup=warmup, streams=streams,
                device_profile=device_profile,
            )  # fmt: skip
            parts[role] = part
            return make_boxed_func(part)

        return compile_graph

    compiled = aot_module(model, fw_compiler=compiler("forward"), bw_compiler=compiler("backward"))
    meta = [(tuple(x.shape), x.dtype) for x in inputs if isinstance(x, torch.Tensor)]

    class ScheduledTrainingModule(torch.nn.Module):
        """Training-mode ScheduledModule: ``.plan`` (forward, multi-stream), ``.backward_plan``."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model
            self._compiled = compiled
            self._parts = parts

        def forward(self, *args: Any) -> Any:
            got = [(tuple(x.shape), x.dtype) for x in args if isinstance(x, torch.Tensor)]
            if got != meta:
                raise ValueError(
                    f"gpuopt.aot: inputs {got} differ from the example inputs {meta}; "
                    "a scheduled module is static"
                )
            return self._compiled(*args)

        @property
        def plan(self) -> Plan:
            return self._parts["forward"].plan  # type: ignore[return-value]

        @property
        def backward_plan(self) -> Plan | None:
            part = self._parts.get("backward")
            return part.plan if part is not None else None

        def simulate(self, seed: int = 0, part: str = "forward") -> SimReport:
            return self._parts[part].simulate(seed)

        def estimate(self, profile: str = "h100") -> Estimate:
            from gpuopt.aot.costmodel import get_profile
            from gpuopt.aot.simulate import estimate

            return estimate(self.plan, get_profile(profile))

    module = ScheduledTrainingModule()
    # One forward on the example inputs compiles and plans the forward graph; the model's
    # buffers are restored afterwards and no gradient is computed.
    with buffers_restored(model), torch.enable_grad():
        compiled(*inputs)
    if "forward" not in parts:
        raise RuntimeError(
            "AOTAutograd did not produce a forward graph (does any parameter require grad?)"
        )
    return module
