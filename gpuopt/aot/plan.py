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
``ops``            per node: ``target`` and the cost-model inputs measured at capture
                   (``kind`` kernel/view/none, ``flops``, ``bytes``, ``elems``, ``dtype``, ``class``)
``stats``          sizes: |E|, |E'| (``reduced_edges``), |M| (``matching``), chains before merging
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

from gpuopt.aot.graph import Dag, GraphError
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
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise PlanError(f"not a plan document: {type(exc).__name__}: {exc}") from None
        plan.validate()
        return plan

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> Plan:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise PlanError(f"{path}: cannot read plan: {exc}") from None
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
) -> Plan:
    """Plan streams and syncs for a DAG given as names (in launch order) and edges."""
    dag = Dag.from_edges(names, edges)
    sa: StreamAssignment = assign_streams(dag, weight, merge=merge)
    return plan_from_assignment(dag, sa)


def plan_from_assignment(dag: Dag, sa: StreamAssignment) -> Plan:
    names = dag.names
    streams = {names[i]: sa.stream_of[i] for i in range(len(names))}
    side = list(range(1, sa.num_streams))
    return Plan(
        nodes=list(names),
        edges=[(names[i], names[j]) for i, j in dag.edges()],
        streams=streams,
        syncs=[(names[u], names[v]) for u, v in sa.syncs],
        num_streams=sa.num_streams,
        order=list(names),
        fork=side,
        join=side,
        stats={
            "edges": dag.num_edges(),
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
) -> dict[str, str]:
    """When each intermediate value's reference may be dropped without a cross-stream reuse hazard.

    The CUDA caching allocator hands a freed block back to the stream that allocated it; later
    work on that stream may reuse it at once, without waiting for readers on other streams.
    So a value may be dropped right after its last reader (in launch order) only if every node
    that touches any of its storages (its producer, views of it, readers of those) runs on one
    stream; otherwise it is held until the side streams have joined (``"@join"``).

    ``value_storages``: storage ids per value (measured at capture; views share their base's id).
    ``node_reads``: values each node reads. ``keep``: values never dropped (graph outputs).
    Storages reachable from a kept value are never freed by dropping other values, but the
    policy is computed per storage, so this needs no special case.
    """
    touch: dict[int, set[int]] = {}
    for name in plan.order:
        s = plan.streams[name]
        for sid in value_storages.get(name, ()):
            touch.setdefault(sid, set()).add(s)
        for v in node_reads.get(name, ()):
            for sid in value_storages.get(v, ()):
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
        if single:
            release[name] = last_reader.get(name, name)
        else:
            release[name] = JOIN
    return release
