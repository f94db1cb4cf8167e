"""The schedule as plain data: what runs on which stream, which syncs, in which launch order.

A plan is JSON (``Plan.to_dict`` / ``Plan.from_dict``); loading one never executes anything. It is
everything an executor needs besides the operators themselves:

``nodes``          compute nodes, in launch order
``edges``          data dependences ``[src, dst]`` (the DAG G)
``streams``        ``{node: stream}``; stream 0 is the origin (the caller's current stream)
``syncs``          cross-stream edges of the transitive reduction: after ``src`` an event is
                   recorded on its stream, before ``dst`` its stream waits on it
``num_streams``    number of streams
``order``          host launch order (a topological order of G)
``fork``/``join``  side streams that wait on the origin stream before their first node, and that
                   the origin stream waits on after the last node (all side streams)
``release``        ``{value: node | "@join"}``: when the executor drops its reference to an
                   intermediate value (see :func:`release_policy`); values not listed are kept
                   (outputs, inputs, parameters)
``ops``            per node: ``target`` and the cost-model inputs measured at capture (``kind``
                   kernel/view/none, ``flops``, ``bytes``, ``elems``, ``dtype``, ``class``)
``stats``          sizes: |E| (``edges``), kernels and the edges between them (streams are
                   assigned on kernels only, see :func:`build_plan`), |E'| (``reduced_edges``)
                   and |M| (``matching``) of that kernel DAG, chains before merging
``memory``         storage ids (measured at capture) of the ``inputs`` (written by the caller),
                   ``constants`` (parameters, buffers) and ``outputs``; with the per-node
                   ``storages``/``reads``/``writes`` in ``ops`` this is what the simulated
                   executor checks accesses against
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuopt.aot.graph import Dag, GraphError, iter_bits
from gpuopt.aot.streams import StreamAssignment, assign_streams

PLAN_SCHEMA = "gpuopt.aot.plan/1"
JOIN = "@join"


class PlanError(ValueError):
    """A plan document that is malformed or inconsistent."""


@dataclass
class Plan:
    nodes: list[str]
    edges: list[tuple[str, str]]
    streams: dict[str, int]
    syncs: list[tuple[str, str]]
    num_streams: int
    order: list[str]
    fork: list[int] = field(default_factory=list)
    join: list[int] = field(default_factory=list)
    release: dict[str, str] = field(default_factory=dict)
    ops: dict[str, dict[str, Any]] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    capture: str = "unknown"
    notes: list[str] = field(default_factory=list)
    origin_stream: int = 0
    memory: dict[str, list[int]] = field(default_factory=dict)
    # multi-stream or one stream, and how that was decided (gpuopt.aot.choice.StreamChoice)
    choice: dict[str, Any] = field(default_factory=dict)

    # ----------------------------------------------------------------- derived views
    def stream_sequences(self) -> list[list[str]]:
        """Nodes of each stream, in launch order."""
        seqs: list[list[str]] = [[] for _ in range(self.num_streams)]
        for name in self.order:
            seqs[self.streams[name]].append(name)
        return seqs

    def waits(self) -> dict[str, list[str]]:
        """``{dst: [src, ...]}``: the sync sources each node's stream waits on before it."""
        out: dict[str, list[str]] = {}
        for src, dst in self.syncs:
            out.setdefault(dst, []).append(src)
        return out

    def event_sources(self) -> set[str]:
        """Nodes after which an event is recorded (sources of at least one sync)."""
        return {src for src, _ in self.syncs}

    def dag(self) -> Dag:
        return Dag.from_edges(self.order, self.edges)

    def one_stream(self, note: str = "one stream") -> Plan:
        """A copy with every node on the origin stream, in the same launch order: no syncs, no
        fork or join (the release policy stays valid: one stream only makes it safer)."""
        import copy

        plan = copy.deepcopy(self)
        plan.streams = dict.fromkeys(plan.nodes, 0)
        plan.syncs = []
        plan.num_streams = 1 if plan.nodes else 0
        plan.fork, plan.join = [], []
        if note:
            plan.notes.append(note)
        return plan

    # ----------------------------------------------------------------- (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": PLAN_SCHEMA,
            "nodes": list(self.nodes),
            "edges": [[s, d] for s, d in self.edges],
            "streams": dict(self.streams),
            "syncs": [[s, d] for s, d in self.syncs],
            "num_streams": self.num_streams,
            "order": list(self.order),
            "origin_stream": self.origin_stream,
            "fork": list(self.fork),
            "join": list(self.join),
            "release": dict(self.release),
            "ops": {k: dict(v) for k, v in self.ops.items()},
            "stats": dict(self.stats),
            "capture": self.capture,
            "notes": list(self.notes),
            "memory": {k: list(v) for k, v in self.memory.items()},
            "choice": dict(self.choice),
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Plan:
        """Read a plan document; raises PlanError with a one-line reason when it is invalid."""
        if not isinstance(doc, Mapping):
            raise PlanError("a plan is a JSON object")
        try:
            plan = cls(
                nodes=[str(x) for x in doc["nodes"]],
                edges=[(str(s), str(d)) for s, d in doc["edges"]],
                streams={str(k): int(v) for k, v in doc["streams"].items()},
                syncs=[(str(s), str(d)) for s, d in doc["syncs"]],
                num_streams=int(doc["num_streams"]),
                order=[str(x) for x in doc["order"]],
                fork=[int(x) for x in doc.get("fork", [])],
                join=[int(x) for x in doc.get("join", [])],
                release={str(k): str(v) for k, v in doc.get("release", {}).items()},
                ops={str(k): dict(v) for k, v in doc.get("ops", {}).items()},
                stats=dict(doc.get("stats", {})),
                capture=str(doc.get("capture", "unknown")),
                notes=[str(x) for x in doc.get("notes", [])],
                origin_stream=int(doc.get("origin_stream", 0)),
                memory={str(k): [int(x) for x in v] for k, v in doc.get("memory", {}).items()},
                choice=dict(doc.get("choice", {})),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise PlanError(f"not a plan document: {type(exc).__name__}: {exc}") from None
        plan.validate()
        return plan

    def save(self, path: Path) -> None:
        from gpuopt.paths import utf8, write_output

        write_output(Path(path), utf8(json.dumps(self.to_dict(), indent=1) + "\n"))

    @classmethod
    def load(cls, path: Path) -> Plan:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise PlanError(f"{path}: cannot read plan: {exc}") from None
        except RecursionError:
            raise PlanError(f"{path}: cannot read plan: JSON nested too deeply") from None
        return cls.from_dict(doc)

    # ----------------------------------------------------------------- consistency
    def validate(self) -> None:
        """Structural checks (not the ordering proof, which is the simulated executor's job)."""
        if sorted(self.nodes) != sorted(self.order) or len(set(self.order)) != len(self.order):
            raise PlanError("order must list every node exactly once")
        if set(self.streams) != set(self.nodes):
            raise PlanError("every node needs exactly one stream")
        if any(not 0 <= s < self.num_streams for s in self.streams.values()):
            raise PlanError("stream ids must lie in [0, num_streams)")
        try:
            Dag.from_edges(self.order, self.edges)
        except GraphError as exc:
            raise PlanError(f"edges: {exc}") from None
        names = set(self.nodes)
        for src, dst in self.syncs:
            if src not in names or dst not in names:
                raise PlanError(f"sync {src!r} -> {dst!r} names an unknown node")
        for value, when in self.release.items():
            if when != JOIN and when not in names:
                raise PlanError(f"release of {value!r} names an unknown node {when!r}")


def build_plan(
    names: Sequence[str],
    edges: Sequence[tuple[str, str]],
    *,
    weight: Sequence[float] | None = None,
    merge: bool = True,
    kernel: Mapping[str, bool] | None = None,
) -> Plan:
    """Plan streams and syncs for a DAG given as names (in launch order) and edges.

    ``kernel[name]`` False marks a node that launches no GPU work (a view, ``getitem``, a
    ``detach``): it needs no stream order and no sync, since the host creates it, in launch
    order, from tensors it already holds. Streams are assigned on the DAG of kernel nodes, with an
    edge between two kernels wherever a path joins them through non-kernel nodes only; each
    non-kernel node is then put on the stream of its latest kernel ancestor (else the origin).
    Without ``kernel`` every node is a kernel.
    """
    dag = Dag.from_edges(names, edges)
    n = len(names)
    is_kernel = [True] * n if kernel is None else [bool(kernel.get(name, True)) for name in names]
    kidx = [i for i in range(n) if is_kernel[i]]
    kpos = {i: k for k, i in enumerate(kidx)}
    frontier = [0] * n  # bit set of the nearest kernel ancestors (itself, for a kernel)
    kedges: set[tuple[int, int]] = set()
    for i in range(n):
        acc = 0
        for p in dag.pred[i]:
            acc |= frontier[p]
        if is_kernel[i]:
            for k in iter_bits(acc):
                kedges.add((kpos[k], kpos[i]))
            frontier[i] = 1 << i
        else:
            frontier[i] = acc
    kdag = Dag.from_edges(
        [names[i] for i in kidx], [(names[kidx[a]], names[kidx[b]]) for a, b in kedges]
    )
    kweight = [weight[i] for i in kidx] if weight is not None else None
    sa: StreamAssignment = assign_streams(kdag, kweight, merge=merge)
    streams: dict[str, int] = {}
    for i in range(n):
        if is_kernel[i]:
            streams[names[i]] = sa.stream_of[kpos[i]]
        else:
            latest = frontier[i].bit_length() - 1
            streams[names[i]] = sa.stream_of[kpos[latest]] if latest >= 0 else 0
    side = list(range(1, sa.num_streams))
    return Plan(
        nodes=list(names),
        edges=[(names[i], names[j]) for i, j in dag.edges()],
        streams=streams,
        syncs=[(kdag.names[u], kdag.names[v]) for u, v in sa.syncs],
        num_streams=max(sa.num_streams, 1 if n else 0),
        order=list(names),
        fork=side,
        join=side,
        stats={
            "edges": dag.num_edges(),
            "kernels": len(kidx),
            "kernel_edges": kdag.num_edges(),
            "reduced_edges": len(sa.reduced_edges),
            "matching": len(sa.matching),
            "chains": sa.num_chains,
        },
    )


def release_policy(
    plan: Plan,
    value_storages: Mapping[str, Sequence[int]],
    node_reads: Mapping[str, Sequence[str]],
    keep: set[str],
    accesses: Mapping[str, Sequence[int]] | None = None,
) -> dict[str, str]:
    """When each intermediate value's reference may be dropped without a cross-stream reuse hazard.

    The CUDA caching allocator hands a freed block back to the stream that allocated it; later
    work on that stream may reuse it at once, without waiting for readers on other streams.
    So a value may be dropped right after its last reader (in launch order) only if every kernel
    that touches any of its storages (its producer, readers of it or of views of it) runs on one
    stream; otherwise it is held until the side streams have joined (``"@join"``).

    ``value_storages``: storage ids per value (measured at capture; views share their base's id).
    ``node_reads``: values each node takes as inputs (for the last reader, in launch order).
    ``accesses``: storages each node reads or writes on the device (kernels only); by default,
    the storages of the values it reads and produces. ``keep``: values never dropped (outputs).
    """
    touch: dict[int, set[int]] = {}
    for name in plan.order:
        s = plan.streams[name]
        if accesses is not None:
            touched: Sequence[int] | set[int] = accesses.get(name, ())
        else:
            touched = set(value_storages.get(name, ()))
            for v in node_reads.get(name, ()):
                touched |= set(value_storages.get(v, ()))
        for sid in touched:
            touch.setdefault(sid, set()).add(s)
    last_reader: dict[str, str] = {}
    for name in plan.order:
        for v in node_reads.get(name, ()):
            last_reader[v] = name
    release: dict[str, str] = {}
    for name in plan.order:
        if name in keep:
            continue
        storages = value_storages.get(name, ())
        single = all(len(touch.get(sid, ())) <= 1 for sid in storages)
        release[name] = last_reader.get(name, name) if single else JOIN
    return release
