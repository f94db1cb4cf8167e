"""The operator DAG the scheduler works on, with reachability and transitive reduction.

Nodes are indexed by their position in a topological order (the launch order), so an edge always
goes from a lower to a higher index. Reachability is kept as one Python integer per node used as a
bit set ("bit ``j`` of ``reach[i]`` is set when there is a path i -> j"): unions are single big-int
ORs, which is what lets a 5,000-node graph be reduced in milliseconds, where
``networkx.transitive_reduction`` (used in the tests as the reference) takes seconds.

This module is pure Python: reading or checking a plan never needs torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


class GraphError(ValueError):
    """The edges do not describe a DAG over the given nodes in the given order."""


@dataclass
class Dag:
    """A DAG over ``names`` whose list order is a topological order.

    ``succ[i]`` / ``pred[i]`` are sorted, duplicate-free index lists.
    """

    names: list[str]
    succ: list[list[int]]
    pred: list[list[int]]
    index: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_edges(cls, names: Sequence[str], edges: Iterable[tuple[str, str]]) -> Dag:
        """Build from node names (in topological order) and ``(src, dst)`` name pairs.

        Raises GraphError for unknown names, self loops or an edge that goes backwards in the
        given order (which is how a cycle, or an order that is not topological, shows up).
        """
        index = {name: i for i, name in enumerate(names)}
        if len(index) != len(names):
            raise GraphError("duplicate node names")
        n = len(names)
        succ_sets: list[set[int]] = [set() for _ in range(n)]
        for src, dst in edges:
            if src not in index or dst not in index:
                raise GraphError(f"edge {src!r} -> {dst!r} names an unknown node")
            i, j = index[src], index[dst]
            if i >= j:
                raise GraphError(
                    f"edge {src!r} -> {dst!r} goes against the order "
                    "(cycle or non-topological order)"
                )
            succ_sets[i].add(j)
        succ = [sorted(s) for s in succ_sets]
        pred: list[list[int]] = [[] for _ in range(n)]
        for i, js in enumerate(succ):
            for j in js:
                pred[j].append(i)
        return cls(list(names), succ, pred, index)

    def __len__(self) -> int:
        return len(self.names)

    def edges(self) -> list[tuple[int, int]]:
        return [(i, j) for i, js in enumerate(self.succ) for j in js]

    def num_edges(self) -> int:
        return sum(len(js) for js in self.succ)


def descendants(dag: Dag) -> list[int]:
    """``reach[i]``: bit set of the nodes reachable from ``i`` by a path of length >= 1."""
    n = len(dag)
    reach = [0] * n
    for i in range(n - 1, -1, -1):
        acc = 0
        for j in dag.succ[i]:
            acc |= reach[j] | (1 << j)
        reach[i] = acc
    return reach


def transitive_reduction(dag: Dag, reach: list[int] | None = None) -> list[tuple[int, int]]:
    """The edges of the minimum equivalent graph (for a DAG: the unique transitive reduction).

    An edge ``i -> j`` is redundant exactly when ``j`` is reachable from another successor of
    ``i``; since ``j`` is never reachable from itself, that is "bit j is set in the union of the
    successors' reach sets".
    """
    if reach is None:
        reach = descendants(dag)
    kept: list[tuple[int, int]] = []
    for i, js in enumerate(dag.succ):
        union = 0
        for j in js:
            union |= reach[j]
        for j in js:
            if not (union >> j) & 1:
                kept.append((i, j))
    return kept


def reaches(reach: list[int], i: int, j: int) -> bool:
    """Is there a path of length >= 1 from ``i`` to ``j``?"""
    return bool((reach[i] >> j) & 1)


def longest_path(dag: Dag, weight: Sequence[float]) -> tuple[float, list[int]]:
    """Heaviest path (sum of node weights) and its nodes: the critical path."""
    n = len(dag)
    if n == 0:
        return 0.0, []
    best = [0.0] * n
    prev = [-1] * n
    for j in range(n):
        base = 0.0
        arg = -1
        for i in dag.pred[j]:
            if best[i] > base or arg < 0:
                base, arg = best[i], i
        best[j] = base + weight[j]
        prev[j] = arg
    end = max(range(n), key=lambda k: best[k])
    path = []
    k = end
    while k >= 0:
        path.append(k)
        k = prev[k]
    path.reverse()
    return best[end], path


def iter_bits(mask: int) -> Iterable[int]:
    """Indices of the set bits of ``mask``, lowest first."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low
