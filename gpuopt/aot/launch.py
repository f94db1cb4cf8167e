"""The host-side launch script of a plan: the exact sequence of stream operations to issue.

Both executors follow this one script, so what the CPU simulator proves is what the CUDA executor
issues:

1. ``fork_record`` on the origin stream (after the caller's writes of the inputs), then a
   ``fork_wait`` on every side stream;
2. per node in launch order: a ``wait`` for each sync source, the ``run``, a ``record`` if the
   node is the source of a sync, then the ``release`` of values whose last reader this was;
3. ``join_record`` on every side stream and a ``join_wait`` of the origin stream on each;
4. the ``release`` of values held until the join.

One event per sync *source* node is enough (all its cross-stream readers wait on the same
record), so the script has one wait per sync edge and one record per source.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuopt.aot.plan import JOIN, Plan


@dataclass(frozen=True)
class Action:
    """One host-side operation. ``ref`` is the node (run/record/wait: the event's source node),
    the value (release), or the side stream (fork_wait/join_record/join_wait)."""

    kind: str
    stream: int
    ref: str = ""
    side: int = -1


def launch_script(plan: Plan) -> list[Action]:
    origin = plan.origin_stream
    waits = plan.waits()
    sources = plan.event_sources()
    released_after: dict[str, list[str]] = {}
    at_join: list[str] = []
    for value, when in plan.release.items():
        if when == JOIN:
            at_join.append(value)
        else:
            released_after.setdefault(when, []).append(value)
    pos = {n: i for i, n in enumerate(plan.order)}
    at_join.sort(key=lambda v: pos.get(v, -1))
    script: list[Action] = [Action("fork_record", origin)]
    script += [Action("fork_wait", s, side=s) for s in plan.fork]
    for node in plan.order:
        s = plan.streams[node]
        script += [Action("wait", s, ref=src) for src in waits.get(node, ())]
        script.append(Action("run", s, ref=node))
        if node in sources:
            script.append(Action("record", s, ref=node))
        script += [
            Action("release", s, ref=v)
            for v in sorted(released_after.get(node, ()), key=lambda v: pos.get(v, -1))
        ]
    for s in plan.join:
        script.append(Action("join_record", s, side=s))
        script.append(Action("join_wait", origin, side=s))
    script += [Action("release", origin, ref=v) for v in at_join]
    return script
