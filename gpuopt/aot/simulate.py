"""Discrete-event simulation of a plan under the cost model: the speedup *estimate*.

Three ways to run the same graph are simulated with the same per-op costs:

``eager``         PyTorch eager: the host issues ops one by one in launch order, each costing its
                  host time (dispatch + launch); a kernel starts a launch gap after it has been
                  issued and the previous kernel (one stream) has finished. Small kernels leave
                  the GPU idle while the host catches up: Nimble's "scheduling overhead".
``graph``         one CUDA graph on one stream: no host work per op, a small gap per kernel.
``multistream``   the plan replayed as one CUDA graph: each stream runs its nodes in order, a
                  node waits for its sync sources, and kernels that overlap share the GPU
                  (processor sharing: while the running kernels' widths sum to more than 1, each
                  progresses at 1/sum of its solo speed).

Every result is an estimate and carries its model's label; nothing here is measured.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuopt.aot.costmodel import DeviceProfile, OpCost, Precision, op_costs
from gpuopt.aot.graph import Dag, longest_path
from gpuopt.aot.plan import Plan

_EPS = 1e-15


def simulate(
    order: Sequence[str],
    stream_of: Mapping[str, int],
    waits: Mapping[str, Sequence[str]],
    costs: Mapping[str, OpCost],
    *,
    gap_s: float = 0.0,
    event_s: float = 0.0,
    host_ready: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Finish time of every node. See the module docstring for the rules.

    ``waits[v]``: nodes on other streams that ``v`` waits for. ``host_ready[v]``: earliest time
    the host has issued ``v`` (eager); ``gap_s`` is added before each kernel on its stream.
    """
    if not order:
        return {}
    run = _StreamRun(order, stream_of, waits, costs, gap_s, event_s, host_ready or {})
    return run.finish_times()


def _stream_neighbours(
    order: Sequence[str], stream_of: Mapping[str, int]
) -> tuple[dict[str, str], dict[str, str]]:
    """Each node's predecessor and successor on its own stream (streams run in launch order)."""
    seqs: dict[int, list[str]] = {}
    for name in order:
        seqs.setdefault(stream_of[name], []).append(name)
    prev: dict[str, str] = {}
    nxt: dict[str, str] = {}
    for seq in seqs.values():
        for a, b in zip(seq, seq[1:], strict=False):
            prev[b] = a
            nxt[a] = b
    return prev, nxt


class _StreamRun:
    """One discrete-event run: nodes become ready when their stream predecessor and sync
    sources have finished; running kernels share the GPU (processor sharing)."""

    def __init__(
        self,
        order: Sequence[str],
        stream_of: Mapping[str, int],
        waits: Mapping[str, Sequence[str]],
        costs: Mapping[str, OpCost],
        gap_s: float,
        event_s: float,
        host_ready: Mapping[str, float],
    ) -> None:
        self.order = order
        self.waits = waits
        self.costs = costs
        self.gap_s = gap_s
        self.event_s = event_s
        self.host = host_ready
        self.prev, self.nxt = _stream_neighbours(order, stream_of)
        # Dependants of each sync source, and how many finishes each node still waits for.
        self.dependants: dict[str, list[str]] = {}
        self.pending: dict[str, int] = {}
        for name in order:
            srcs = list(waits.get(name, ()))
            self.pending[name] = len(srcs) + (1 if name in self.prev else 0)
            for src in srcs:
                self.dependants.setdefault(src, []).append(name)
        self.pos = {name: i for i, name in enumerate(order)}
        self.finish: dict[str, float] = {}
        self.ready_heap: list[tuple[float, int, str]] = []
        self.running: dict[str, float] = {}  # name -> remaining solo seconds
        self.now = 0.0

    def finish_times(self) -> dict[str, float]:
        """Run the simulation to the end; the finish time of every node."""
        for name in self.order:
            if self.pending[name] == 0:
                self._make_ready(name)
        while len(self.finish) < len(self.order):
            self._start_ready_now()
            if len(self.finish) == len(self.order):
                break
            if not self.running:
                if not self.ready_heap:
                    raise RuntimeError("simulation deadlock: the plan's waits form a cycle")
                self.now = self.ready_heap[0][0]
                continue
            self._advance()
        return self.finish

    def _ready_time(self, v: str) -> float:
        # Dependencies first (stream predecessor, sync sources, host issue), then the kernel's
        # own launch gap.
        t = self.host.get(v, 0.0)
        if v in self.prev:
            t = max(t, self.finish[self.prev[v]])
        for src in self.waits.get(v, ()):
            t = max(t, self.finish[src] + self.event_s)
        return t + (self.gap_s if self.costs[v].kernel else 0.0)

    def _make_ready(self, v: str) -> None:
        heapq.heappush(self.ready_heap, (self._ready_time(v), self.pos[v], v))

    def _complete(self, v: str, t: float) -> None:
        self.finish[v] = t
        followers = list(self.dependants.get(v, ()))
        if v in self.nxt:
            followers.append(self.nxt[v])
        for w in followers:
            self.pending[w] -= 1
            if self.pending[w] == 0:
                self._make_ready(w)

    def _start_ready_now(self) -> None:
        """Start everything that is ready now (a node with no device time finishes at once)."""
        while self.ready_heap and self.ready_heap[0][0] <= self.now + _EPS:
            _, _, v = heapq.heappop(self.ready_heap)
            c = self.costs[v]
            if c.solo_s <= 0.0:
                self._complete(v, max(self.now, 0.0))
            else:
                self.running[v] = c.solo_s

    def _advance(self) -> None:
        """Move time to the next kernel finish or the next node ready, whichever comes first;
        running kernels progress at 1/sum of their widths while that sum exceeds 1."""
        running = self.running
        total_w = sum(self.costs[v].width for v in running)
        rate = 1.0 if total_w <= 1.0 else 1.0 / total_w
        t_done = self.now + min(running.values()) / rate
        t_next = min(t_done, self.ready_heap[0][0]) if self.ready_heap else t_done
        dt = t_next - self.now
        for v in list(running):
            running[v] -= dt * rate
            if running[v] <= _EPS * 1e3:
                del running[v]
                self._complete(v, t_next)
        self.now = t_next


@dataclass
class Estimate:
    """Modelled times (seconds) of one forward pass; all estimates, never measurements."""

    profile: str
    model: str
    eager_s: float
    graph_s: float
    multistream_s: float
    critical_path_s: float
    work_s: float
    kernels: int
    nodes: int
    critical_path_nodes: int

    @property
    def speedup_graph(self) -> float:
        return self.eager_s / self.graph_s if self.graph_s else float("nan")

    @property
    def speedup_multistream(self) -> float:
        return self.eager_s / self.multistream_s if self.multistream_s else float("nan")

    @property
    def multistream_over_graph(self) -> float:
        return self.graph_s / self.multistream_s if self.multistream_s else float("nan")

    @property
    def critical_path_share(self) -> float:
        """Critical path over total device work (1.0: no parallelism to exploit)."""
        return self.critical_path_s / self.work_s if self.work_s else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "estimate",
            "profile": self.profile,
            "model": self.model,
            "eager_s": self.eager_s,
            "graph_s": self.graph_s,
            "multistream_s": self.multistream_s,
            "critical_path_s": self.critical_path_s,
            "work_s": self.work_s,
            "critical_path_share": self.critical_path_share,
            "critical_path_nodes": self.critical_path_nodes,
            "kernels": self.kernels,
            "nodes": self.nodes,
            "speedup_graph_over_eager": self.speedup_graph,
            "speedup_multistream_over_eager": self.speedup_multistream,
            "speedup_multistream_over_graph": self.multistream_over_graph,
        }


def estimate(plan: Plan, profile: DeviceProfile, precision: Precision | None = None) -> Estimate:
    """Simulate eager, single-stream graph and the plan's multi-stream graph (module docstring)."""
    costs = op_costs(plan.ops, profile, precision)
    for name in plan.order:  # nodes without measurements count as one small kernel
        costs.setdefault(
            name, OpCost(True, profile.min_kernel_s, 1.0 / profile.num_sms, profile.eager_op_s)
        )
    order = plan.order
    host_ready: dict[str, float] = {}
    t = 0.0
    for name in order:
        t += costs[name].host_s
        host_ready[name] = t
    single = dict.fromkeys(order, 0)
    eager = simulate(order, single, {}, costs, gap_s=profile.stream_kernel_s, host_ready=host_ready)
    graph = simulate(order, single, {}, costs, gap_s=profile.graph_kernel_s)
    multi = simulate(
        order,
        plan.streams,
        plan.waits(),
        costs,
        gap_s=profile.graph_kernel_s,
        event_s=profile.event_s,
    )
    weight = [costs[n].solo_s + (profile.graph_kernel_s if costs[n].kernel else 0.0) for n in order]
    dag = Dag.from_edges(order, plan.edges)
    cp_s, _ = longest_path(dag, weight)
    _, cp_nodes = longest_path(dag, [1.0] * len(order))
    return Estimate(
        profile=profile.name,
        model=profile.label(),
        eager_s=max(eager.values(), default=0.0),
        graph_s=max(graph.values(), default=0.0) + profile.graph_launch_s,
        multistream_s=max(multi.values(), default=0.0) + profile.graph_launch_s,
        critical_path_s=cp_s,
        work_s=sum(weight),
        kernels=sum(1 for n in order if costs[n].kernel),
        nodes=len(order),
        critical_path_nodes=len(cp_nodes),
    )
