"""CUDA executor: the plan's launch script on real streams and events, captured into a CUDA graph.

Kept thin on purpose: every decision (which stream, which waits and records, when a value may be
released) comes from :func:`gpuopt.aot.launch.launch_script`, which the CPU stream simulator
checks. This module only maps script actions onto ``torch.cuda`` calls:

* one dedicated ``torch.cuda.Stream`` per side stream; stream 0 is the caller's current stream
  (during capture: the capture stream), so the fork/join make the side streams part of the graph;
* one ``torch.cuda.Event`` per sync source, recorded after it; waits only on cross-stream edges;
* warm-up runs on a side stream before capture (as PyTorch's CUDA-graph docs require), then one
  capture into ``torch.cuda.CUDAGraph``; calls copy the inputs into static input buffers, replay,
  and return clones of the static outputs (the next replay overwrites them);
* values are released as the plan says: a value touched by one stream only after its last reader,
  any other only after the join, so the caching allocator never hands a block to one stream while
  another may still read it.

Its tests need a GPU and are skipped elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpuopt.aot.launch import launch_script
from gpuopt.aot.plan import Plan

if TYPE_CHECKING:  # pragma: no cover
    import torch


def _new_stream(device: torch.device) -> torch.cuda.Stream:
    """A new CUDA stream on ``device``."""
    import torch

    return torch.cuda.Stream(device=device)  # type: ignore[no-untyped-call]  # torch: unannotated


def _event_recorded_on(stream: torch.cuda.Stream) -> torch.cuda.Event:
    """A new CUDA event, recorded on ``stream`` now."""
    import torch

    ev = torch.cuda.Event()  # type: ignore[no-untyped-call]  # torch: unannotated
    ev.record(stream)
    return ev


class CudaPlanRunner:
    """Runs one plan on one CUDA device (eagerly on streams, or captured and replayed)."""

    def __init__(
        self, program: Any, plan: Plan, device: Any, *, use_graph: bool = True, warmup: int = 2
    ) -> None:
        import torch

        self.program = program
        self.plan = plan
        self.device = torch.device(device)
        self.use_graph = use_graph
        self.warmup = warmup
        self.script = launch_script(plan)
        self.side = [_new_stream(self.device) for _ in range(plan.num_streams - 1)]
        self.graph: Any = None
        self.static_inputs: list[Any] = []
        self.static_outputs: Any = None

    def launch(self, leaves: Sequence[Any]) -> Any:
        """Issue the whole plan once on the current stream plus the side streams."""
        import torch

        program = self.program
        origin = torch.cuda.current_stream(self.device)
        streams = [origin, *self.side]
        if self.plan.origin_stream != 0:  # pragma: no cover - plans always use 0
            raise ValueError("plan origin stream must be 0")
        env = program.bind_inputs(leaves)
        program.run_guards(env)
        events: dict[str, Any] = {}
        for act in self.script:
            stream = streams[act.stream]
            kind = act.kind
            if kind == "run":
                with torch.cuda.stream(stream):
                    program.run(act.ref, env)
            elif kind == "wait":
                stream.wait_event(events[act.ref])
            elif kind == "record":
                events[act.ref] = _event_recorded_on(stream)
            elif kind == "fork_record":
                events["@fork"] = _event_recorded_on(origin)
            elif kind == "fork_wait":
                stream.wait_event(events["@fork"])
            elif kind == "join_record":
                events[f"@join{act.side}"] = _event_recorded_on(stream)
            elif kind == "join_wait":
                origin.wait_event(events[f"@join{act.side}"])
            elif kind == "release":
                env.pop(program.by_name[act.ref], None)
        return program.collect_outputs(env)

    def _capture(self, leaves: Sequence[Any]) -> None:
        import torch

        self.static_inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in leaves]
        warm = _new_stream(self.device)
        warm.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(warm):
            for _ in range(self.warmup):
                self.launch(self.static_inputs)
        torch.cuda.current_stream(self.device).wait_stream(warm)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.static_outputs = self.launch(self.static_inputs)
        self.graph = graph

    def __call__(self, leaves: Sequence[Any]) -> Any:
        import torch
        import torch.utils._pytree as pytree

        if not self.use_graph:
            return self.launch(leaves)
        if self.graph is None:
            self._capture(leaves)
        for static, x in zip(self.static_inputs, leaves, strict=True):
            if isinstance(static, torch.Tensor):
                static.copy_(x)
        self.graph.replay()
        return pytree.tree_map(
            lambda t: t.clone() if isinstance(t, torch.Tensor) else t, self.static_outputs
        )
