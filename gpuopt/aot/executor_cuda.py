"""CUDA executor: the plan's launch script on real streams and events, captured into a CUDA graph.

Kept thin on purpose: every decision (which stream, which waits and records, when a value may be
released) comes from :func:`gpuopt.aot.launch.launch_script`, which the CPU stream simulator
checks. This module only maps script actions onto ``torch.cuda`` calls:

* one dedicated ``torch.cuda.Stream`` per side stream; stream 0 is the caller's current stream
  (during capture: the capture stream), so the fork/join make the side streams part of the graph;
* one ``torch.cuda.Event`` per sync source (and the fork and joins), created once per runner and
  recorded again on every call; waits only on cross-stream edges;
* the current stream is changed only where the next node runs on another stream. Before, every
  node entered and left a ``torch.cuda.stream`` context and every record created a new event:
  host work per node on top of the operator's own, which is why the no-graph path ran 2.6-3.7x
  slower than eager on the H200 (inception_v3: 17.32 against 6.58 ms). Without a graph the plan
  is still the operators issued one by one from Python, like eager: ``schedule`` never chooses it
  on CUDA (``cuda_graph=False`` is asked for by name);
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

from gpuopt import torch_compat
from gpuopt.aot.launch import launch_script
from gpuopt.aot.plan import Plan

if TYPE_CHECKING:  # pragma: no cover
    import torch


def _new_stream(device: torch.device) -> torch.cuda.Stream:
    """A new CUDA stream on ``device``."""
    import torch

    return torch.cuda.Stream(device=device)  # type: ignore[no-untyped-call]  # torch: unannotated


# the host actions of a prepared launch script
_RUN, _WAIT, _RECORD, _RELEASE = range(4)


def prepared_script(program: Any, plan: Plan) -> tuple[list[tuple[int, int, Any]], list[str]]:
    """The launch script as ``(action, stream, payload)`` rows an executor runs without looking
    anything up, and the events it records (one per sync source, the fork, one join per side
    stream): created once per runner and recorded again on every call, since a wait binds to the
    latest record issued before it and the script issues every record before its waits."""
    rows: list[tuple[int, int, Any]] = []
    events: list[str] = []

    def event(key: str) -> str:
        if key not in events:
            events.append(key)
        return key

    for act in launch_script(plan):
        kind, stream = act.kind, act.stream
        if kind == "run":
            rows.append((_RUN, stream, program.runner(act.ref)))
        elif kind == "wait":
            rows.append((_WAIT, stream, event(act.ref)))
        elif kind == "record":
            rows.append((_RECORD, stream, event(act.ref)))
        elif kind == "fork_record":
            rows.append((_RECORD, stream, event("@fork")))
        elif kind == "fork_wait":
            rows.append((_WAIT, stream, event("@fork")))
        elif kind == "join_record":
            rows.append((_RECORD, stream, event(f"@join{act.side}")))
        elif kind == "join_wait":
            rows.append((_WAIT, stream, event(f"@join{act.side}")))
        elif kind == "release":
            rows.append((_RELEASE, stream, program.by_name[act.ref]))
    return rows, events


def stream_switches(plan: Plan) -> int:
    """How often a launch of ``plan`` changes the current stream (each costs a host call):
    once per run of consecutive nodes on one stream, plus the switch back to the origin."""
    switches, current = 0, plan.origin_stream
    for name in plan.order:
        if plan.streams[name] != current:
            switches += 1
            current = plan.streams[name]
    return switches + (1 if current != plan.origin_stream else 0)


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
        if self.plan.origin_stream != 0:  # pragma: no cover - plans always use 0
            raise ValueError("plan origin stream must be 0")
        self.script = launch_script(plan)
        self.rows, keys = prepared_script(program, plan)
        self.side = [_new_stream(self.device) for _ in range(plan.num_streams - 1)]
        self.events = {k: torch.cuda.Event() for k in keys}  # type: ignore[no-untyped-call]
        self.graph: Any = None
        self.static_inputs: list[Any] = []
        self.static_outputs: Any = None

    def launch(self, leaves: Sequence[Any]) -> Any:
        """Issue the whole plan once on the current stream plus the side streams. The current
        stream changes only where the next node runs on another stream (not around every node),
        and the events are the runner's own, recorded again: per node the host does the
        operator's own call and nothing else."""
        import torch

        program = self.program
        origin = torch.cuda.current_stream(self.device)
        streams = [origin, *self.side]
        env = program.bind_inputs(leaves)
        program.run_guards(env)
        events = self.events
        current = 0
        try:
            for kind, s, payload in self.rows:
                if kind == _RUN:
                    if s != current:
                        torch.cuda.set_stream(streams[s])
                        current = s
                    payload(env)
                elif kind == _WAIT:
                    streams[s].wait_event(events[payload])
                elif kind == _RECORD:
                    events[payload].record(streams[s])
                else:
                    env.pop(payload, None)
        finally:
            if current != 0:
                torch.cuda.set_stream(origin)
        return program.collect_outputs(env)

    def capture(self, leaves: Sequence[Any]) -> None:
        """Warm up on a side stream, then capture one launch into a CUDA graph."""
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

        pytree = torch_compat.pytree()
        if not self.use_graph:
            return self.launch(leaves)
        if self.graph is None:
            self.capture(leaves)
        for static, x in zip(self.static_inputs, leaves, strict=True):
            if isinstance(static, torch.Tensor):
                static.copy_(x)
        self.graph.replay()
        return pytree.tree_map(
            lambda t: t.clone() if isinstance(t, torch.Tensor) else t, self.static_outputs
        )


def time_alternated(graphs: Sequence[Any], rounds: int = 7, reps: int = 20) -> list[list[float]]:
    """Seconds per replay of each captured ``torch.cuda.CUDAGraph``, one time per graph and
    round, the graphs taking turns (reversed every other round, so drift hits each alike), timed
    with CUDA events around ``reps`` back-to-back replays after one untimed replay each."""
    import torch

    for g in graphs:
        g.replay()
    out: list[list[float]] = [[] for _ in graphs]
    for r in range(rounds):
        order = list(range(len(graphs)))
        for i in order if r % 2 == 0 else order[::-1]:
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            for _ in range(reps):
                graphs[i].replay()
            end.record()
            end.synchronize()
            out[i].append(start.elapsed_time(end) / 1e3 / reps)
    return out
