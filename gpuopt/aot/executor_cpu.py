"""CPU executors: the plain reference run, and simulated streams that *prove* a plan's ordering.

:class:`StreamSimulator` issues a plan's launch script (:mod:`gpuopt.aot.launch`) into simulated
FIFO streams with CUDA's event semantics (a wait binds, when it is issued, to the latest record
of that event issued so far; waiting on an event never recorded does nothing), then plays the
streams in a random order allowed by stream order and waits, with vector clocks:

* every stream has a vector clock; running an op ticks it, a record snapshots it, a wait joins it;
* every storage remembers its last write and the reads since; a read must be ordered after the
  last write, a write after every earlier access, a free after every access, and nothing may touch
  a storage after its free;
* a storage is freed when the last value referencing it is released by the launch script (the
  caching allocator may then hand it to later work on its allocating stream; after the join, to
  anything issued after the origin stream's position, hence the free on the origin stream).

Any access not ordered this way is reported as a violation, whatever order the random play
happened to pick, so a missing sync is found on every run, not only on unlucky ones. With a
captured model the operators really run, in the simulated order, so the outputs can be compared
with eager ones.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuopt.aot.launch import Action, launch_script
from gpuopt.aot.plan import Plan

_MAX_VIOLATIONS = 50


@dataclass
class MemoryModel:
    """Which storages each node reads and writes, and which storages each value references.

    This is the *truth* the plan is checked against (measured from the model, or derived from a
    true DAG in tests), never taken from the plan's own edges.
    """

    reads: dict[str, set[int]]
    writes: dict[str, set[int]]
    value_storages: dict[str, set[int]]
    inputs: set[int] = field(default_factory=set)  # written by the caller before the fork
    constants: set[int] = field(default_factory=set)  # parameters: written before anything
    outputs: set[int] = field(default_factory=set)  # read by the caller after the join

    @classmethod
    def from_dag(
        cls,
        nodes: Sequence[str],
        edges: Iterable[tuple[str, str]],
        *,
        input_readers: Iterable[str] = (),
        output_nodes: Iterable[str] = (),
    ) -> MemoryModel:
        """One fresh storage per node, read by its successors in the *true* DAG ``edges``."""
        sid = {n: i for i, n in enumerate(nodes)}
        reads: dict[str, set[int]] = {n: set() for n in nodes}
        for src, dst in edges:
            reads[dst].add(sid[src])
        inp = len(nodes)
        for n in input_readers:
            reads[n].add(inp)
        return cls(
            reads=reads,
            writes={n: {sid[n]} for n in nodes},
            value_storages={n: {sid[n]} for n in nodes},
            inputs={inp},
            outputs={sid[n] for n in output_nodes},
        )

    @classmethod
    def from_plan_ops(cls, plan: Plan, memory: Mapping[str, Any]) -> MemoryModel:
        """From a captured plan's measured ``ops`` entries and its ``memory`` section."""

        def kernel(n: str) -> bool:
            return bool(plan.ops[n].get("kind", "kernel") == "kernel")

        # Only kernels touch memory on the device; a view or getitem is host-side metadata.
        return cls(
            reads={
                n: set(plan.ops[n].get("reads", ())) if kernel(n) else set() for n in plan.order
            },
            writes={
                n: set(plan.ops[n].get("writes", ())) if kernel(n) else set() for n in plan.order
            },
            value_storages={n: set(plan.ops[n].get("storages", ())) for n in plan.order},
            inputs=set(memory.get("inputs", ())),
            constants=set(memory.get("constants", ())),
            outputs=set(memory.get("outputs", ())),
        )


@dataclass
class Violation:
    # unordered-read, unordered-write, read-before-write, use-after-free, unordered-free, deadlock
    kind: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


@dataclass
class SimReport:
    violations: list[Violation]
    played: list[tuple[int, str]]  # (stream, node) in the simulated device order
    frees: int
    outputs: Any = None

    @property
    def ok(self) -> bool:
        return not self.violations


@dataclass
class _Instance:
    """One issued record of an event."""

    vc: list[int] | None = None


@dataclass
class _Op:
    kind: str  # write_inputs, run, record, wait, free, read_outputs
    ref: str = ""
    storage: int = -1
    inst: _Instance | None = None


def _event_key(act: Action) -> str:
    """The event a record or wait action is about: the fork, one side stream's join, or the
    sync source node's event."""
    if act.kind in ("fork_record", "fork_wait"):
        return "@fork"
    if act.kind in ("join_record", "join_wait"):
        return f"@join{act.side}"
    return act.ref


class StreamSimulator:
    """Simulated streams for one plan and one memory model (see the module docstring)."""

    def __init__(self, plan: Plan, memory: MemoryModel) -> None:
        self.plan = plan
        self.memory = memory
        self.script: list[Action] = launch_script(plan)

    # ------------------------------------------------------------------ host side
    def _issue(self) -> tuple[list[list[_Op]], int]:
        """The launch script as the host issues it: one op queue per stream (a wait bound to
        the latest record of its event issued so far, a free on the allocating stream, or on
        the origin stream after the join), and the number of frees."""
        plan, mem = self.plan, self.memory
        queues: list[list[_Op]] = [[] for _ in range(plan.num_streams)]
        origin = plan.origin_stream
        latest: dict[str, _Instance] = {}
        refs: dict[int, int] = {}
        alloc_stream: dict[int, int] = {}
        external = mem.inputs | mem.constants
        joined = False
        frees = 0
        queues[origin].append(_Op("write_inputs"))
        for act in self.script:
            q = queues[act.stream]
            if act.kind in ("fork_record", "record", "join_record"):
                key = _event_key(act)
                inst = _Instance()
                latest[key] = inst
                q.append(_Op("record", ref=key, inst=inst))
            elif act.kind in ("fork_wait", "wait", "join_wait"):
                key = _event_key(act)
                q.append(_Op("wait", ref=key, inst=latest.get(key)))
                if act.kind == "join_wait":
                    joined = True
            elif act.kind == "run":
                q.append(_Op("run", ref=act.ref))
                for sid in mem.value_storages.get(act.ref, ()):
                    refs[sid] = refs.get(sid, 0) + 1
                    alloc_stream.setdefault(sid, act.stream)
            elif act.kind == "release":
                for sid in mem.value_storages.get(act.ref, ()):
                    refs[sid] -= 1
                    if refs[sid] == 0 and sid not in external and sid not in mem.outputs:
                        target = origin if joined else alloc_stream[sid]
                        queues[target].append(_Op("free", ref=act.ref, storage=sid))
                        frees += 1
        queues[origin].append(_Op("read_outputs"))
        return queues, frees

    # ------------------------------------------------------------------ device side
    def run(self, seed: int = 0, execute: Callable[[str], None] | None = None) -> SimReport:
        """Play the streams once in a random legal order; ``execute(node)`` runs the real op."""
        queues, frees = self._issue()
        playback = _Playback(queues, self.memory, execute)
        playback.play(random.Random(seed))
        return SimReport(violations=playback.violations, played=playback.played, frees=frees)


# An access to a storage: (stream, that stream's own clock at the access, who). Stream -1 is
# "before anything" (the parameters).
_Epoch = tuple[int, int, str]


class _Playback:
    """The device side of one simulation: the issued stream queues played in a random legal
    order, with a vector clock per stream and the access history of every storage."""

    def __init__(
        self,
        queues: list[list[_Op]],
        memory: MemoryModel,
        execute: Callable[[str], None] | None,
    ) -> None:
        self.queues = queues
        self.memory = memory
        self.execute = execute
        self.executing = execute is not None
        n_streams = len(queues)
        self.vc = [[0] * n_streams for _ in range(n_streams)]
        self.heads = [0] * n_streams
        self.last_write: dict[int, _Epoch] = {}
        self.reads_since: dict[int, list[_Epoch]] = {}
        self.accesses: dict[int, list[_Epoch]] = {}
        self.freed: dict[int, str] = {}
        self.violations: list[Violation] = []
        self.played: list[tuple[int, str]] = []
        for sid in memory.constants:
            self.last_write[sid] = (-1, 0, "<parameters>")

    def play(self, rng: random.Random) -> None:
        """Run ops, one at a time, from a stream chosen at random among those that can run."""
        remaining = sum(len(q) for q in self.queues)
        while remaining:
            ready = [s for s in range(len(self.queues)) if self._runnable(s)]
            if not ready:
                self._flag_deadlock()
                break
            s = rng.choice(ready)
            op = self.queues[s][self.heads[s]]
            self.heads[s] += 1
            remaining -= 1
            self.vc[s][s] += 1
            self._step(s, op)

    # ------------------------------------------------------------------ scheduling
    def _runnable(self, s: int) -> bool:
        """Stream ``s`` has an op left, and it is not a wait on a record not played yet."""
        if self.heads[s] >= len(self.queues[s]):
            return False
        op = self.queues[s][self.heads[s]]
        return op.kind != "wait" or op.inst is None or op.inst.vc is not None

    def _flag_deadlock(self) -> None:
        queues, heads = self.queues, self.heads
        stuck = [
            f"stream {s} at {queues[s][heads[s]].kind} {queues[s][heads[s]].ref}"
            for s in range(len(queues))
            if heads[s] < len(queues[s])
        ]
        self._flag("deadlock", "; ".join(stuck))

    def _step(self, s: int, op: _Op) -> None:
        """Play ``op`` on stream ``s`` (its clock has already ticked)."""
        mem = self.memory
        if op.kind == "write_inputs":
            for sid in sorted(mem.inputs):
                self._write(sid, s, "<inputs>")
        elif op.kind == "read_outputs":
            for sid in sorted(mem.outputs):
                self._read(sid, s, "<outputs>")
        elif op.kind == "record":
            assert op.inst is not None
            op.inst.vc = list(self.vc[s])
        elif op.kind == "wait":
            if op.inst is not None and op.inst.vc is not None:
                self.vc[s] = [max(a, b) for a, b in zip(self.vc[s], op.inst.vc, strict=True)]
        elif op.kind == "free":
            self._free(op.storage, s, op.ref)
        elif op.kind == "run":
            self._run(op.ref, s)

    # ------------------------------------------------------------------ checks
    def _flag(self, kind: str, msg: str) -> None:
        if len(self.violations) < _MAX_VIOLATIONS:
            self.violations.append(Violation(kind, msg))

    def _ordered_before(self, epoch: _Epoch, s: int) -> bool:
        """Is the access ``epoch`` ordered before stream ``s``'s current position?"""
        st, clock, _ = epoch
        return st < 0 or self.vc[s][st] >= clock

    def _read(self, sid: int, s: int, who: str) -> None:
        if sid in self.freed:
            self._flag(
                "use-after-free",
                f"{who} (stream {s}) reads storage {sid} freed after {self.freed[sid]}",
            )
        lw = self.last_write.get(sid)
        if lw is None:
            self._flag(
                "read-before-write",
                f"{who} (stream {s}) reads storage {sid} before anything wrote it",
            )
        elif not self._ordered_before(lw, s):
            self._flag(
                "unordered-read",
                f"{who} (stream {s}) reads what {lw[2]} (stream {lw[0]}) wrote, "
                "with no sync between them",
            )
        ep = (s, self.vc[s][s], who)
        self.reads_since.setdefault(sid, []).append(ep)
        self.accesses.setdefault(sid, []).append(ep)

    def _write(self, sid: int, s: int, who: str) -> None:
        if sid in self.freed:
            self._flag(
                "use-after-free",
                f"{who} (stream {s}) writes storage {sid} freed after {self.freed[sid]}",
            )
        last = self.last_write.get(sid)
        prior = ([last] if last is not None else []) + self.reads_since.get(sid, [])
        for ep in prior:
            if not self._ordered_before(ep, s):
                self._flag(
                    "unordered-write",
                    f"{who} (stream {s}) overwrites storage {sid} used by {ep[2]} "
                    f"(stream {ep[0]}) with no sync between them",
                )
                break
        ep = (s, self.vc[s][s], who)
        self.last_write[sid] = ep
        self.reads_since[sid] = []
        self.accesses.setdefault(sid, []).append(ep)

    def _free(self, sid: int, s: int, after: str) -> None:
        for ep in self.accesses.get(sid, []):
            if not self._ordered_before(ep, s):
                self._flag(
                    "unordered-free",
                    f"storage {sid} is freed on stream {s} after {after} while {ep[2]} "
                    f"(stream {ep[0]}) may still use it",
                )
                break
        self.freed[sid] = after

    def _run(self, node: str, s: int) -> None:
        """Check the node's accesses; while every check so far passed, really run it too."""
        mem = self.memory
        before_count = len(self.violations)
        for sid in sorted(mem.reads.get(node, ())):
            self._read(sid, s, node)
        for sid in sorted(mem.writes.get(node, ())):
            self._write(sid, s, node)
        self.played.append((s, node))
        if self.executing and len(self.violations) == before_count:
            try:
                assert self.execute is not None
                self.execute(node)
            except KeyError:
                self._flag("read-before-write", f"{node} needs a value that was not computed yet")
                self.executing = False
        elif len(self.violations) != before_count:
            self.executing = False  # values can no longer be trusted


def run_simulated(
    program: Any, plan: Plan, memory: MemoryModel, leaves: Sequence[Any], seed: int = 0
) -> SimReport:
    """Run a captured program under :class:`StreamSimulator`; ``report.outputs`` holds its outputs
    (None when a violation stopped the real execution)."""
    env = program.bind_inputs(leaves)
    program.run_guards(env)
    kernel = {n: plan.ops.get(n, {}).get("kind", "kernel") == "kernel" for n in plan.order}
    done: set[str] = set()

    def materialize(name: str) -> None:
        """Run a non-kernel node (view, getitem) when first needed, as the host would have
        done at launch: it only needs its inputs' tensor objects, not their data."""
        node = program.by_name[name]
        for inp in node.all_input_nodes:
            if inp.name in program.by_name and inp.name not in done:
                if kernel[inp.name]:
                    raise KeyError(inp.name)
                materialize(inp.name)
        program.run(name, env)
        done.add(name)

    def execute(name: str) -> None:
        if kernel[name]:
            materialize(name)

    report = StreamSimulator(plan, memory).run(seed, execute)
    if report.ok:
        for name in program.output_names():
            if name in program.by_name and name not in done:
                materialize(name)
        report.outputs = program.collect_outputs(env)
    return report


def run_sequential(program: Any, plan: Plan, leaves: Sequence[Any]) -> Any:
    """The reference executor: the plan's launch order on the current device, releasing values as
    the plan says. What ``ScheduledModule`` runs on CPU."""
    env = program.bind_inputs(leaves)
    program.run_guards(env)
    by_name = program.by_name
    drop_after: dict[str, list[str]] = {}
    for value, when in plan.release.items():
        drop_after.setdefault(when, []).append(value)
    for name in plan.order:
        program.run(name, env)
        for value in drop_after.get(name, ()):
            env.pop(by_name[value], None)
    return program.collect_outputs(env)
