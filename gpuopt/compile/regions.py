"""One step's compiled regions, counted from its CPU profiler spans (pure).

While a compiled function runs under ``torch.profiler``, Dynamo marks each compiled frame it
enters with a ``Torch-Compiled Region: F/A`` span, and AOTAutograd / Inductor mark each graph
they run (``CompiledFunction``, ``CompiledFunctionBackward``, ``## Call CompiledFxGraph … ##``).
Inside a region and outside every graph are the ops Dynamo left eager at its graph breaks; ops
outside every region are the rest of the step (the optimizer, the loss, anything not compiled).
Backend ``eager`` runs its graphs as plain ops with no span around them: the profile cannot tell
a graph's ops from the eager ones, and says so.
"""

from __future__ import annotations

from collections import defaultdict

from msgspec import Struct

REGION_PREFIX = "Torch-Compiled Region"
_GRAPH_NAMES = ("CompiledFunction", "CompiledFunctionBackward")
_GRAPH_PREFIX = "## Call CompiledFxGraph"
_OP_PREFIXES = ("aten::", "prims::", "c10d::")


class Span(Struct, frozen=True):
    """One profiler event: name, start and end (any unit), thread."""

    name: str
    start: float
    end: float
    thread: int


class RegionCounts(Struct):
    regions: int = 0
    graph_calls: int = 0
    eager_ops: int = 0
    outside_ops: int = 0


def is_region(name: str) -> bool:
    return name.startswith(REGION_PREFIX)


def is_graph_call(name: str) -> bool:
    return name in _GRAPH_NAMES or name.startswith(_GRAPH_PREFIX)


_ENGINE_PREFIX = "autograd::engine::evaluate_function: CompiledFunction"


def is_compiled_container(name: str) -> bool:
    """A span torch.compile puts around compiled code (a region, a graph call, autograd's call
    of a compiled backward): it encloses work, it is not work itself (trace idle causes,
    docs/trace-metrics.md). Dynamo's guard checks (``TorchDynamo Cache Lookup``) and pre-graph
    bytecode are work: ops."""
    return is_region(name) or is_graph_call(name) or name.startswith(_ENGINE_PREFIX)


def _is_op(name: str) -> bool:
    return name.startswith(_OP_PREFIXES)


def count_regions(spans: list[Span]) -> RegionCounts:
    """Regions entered, graphs run, and top-level ops inside regions but outside graphs
    (``eager_ops``) or outside every region (``outside_ops``). Spans nest by time on their
    thread; a top-level op is one no other op encloses."""
    by_thread: dict[int, list[Span]] = defaultdict(list)
    for s in spans:
        by_thread[s.thread].append(s)
    out = RegionCounts()
    for items in by_thread.values():
        items.sort(key=lambda s: (s.start, -s.end))
        # each open span: (end, in_region, in_graph, in_op) of it and its ancestors
        stack: list[tuple[float, bool, bool, bool]] = []
        for s in items:
            while stack and stack[-1][0] <= s.start:
                stack.pop()
            region, graph, op = stack[-1][1:] if stack else (False, False, False)
            name = s.name
            if is_region(name):
                out.regions += 1
            elif is_graph_call(name) and not graph:
                out.graph_calls += 1
            elif _is_op(name) and not op and not graph:
                if region:
                    out.eager_ops += 1
                else:
                    out.outside_ops += 1
            stack.append(
                (s.end, region or is_region(name), graph or is_graph_call(name), op or _is_op(name))
            )
    return out
