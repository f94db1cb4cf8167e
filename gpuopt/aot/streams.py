"""Nimble's stream assignment: fewest syncs at maximum logical concurrency, then fewest streams.

The algorithm (Kwon et al., "Nimble: Lightweight and Parallel GPU Task Scheduling for Deep
Learning", NeurIPS 2020, section 4.2):

1. Reduce the DAG G to its minimum equivalent graph G' = (V, E') (for a DAG, its transitive
   reduction). Every graph with the same reachability contains E'.
2. Build the bipartite graph B with a left copy and a right copy of V and an edge (u_L, v_R) per
   (u, v) in E'; take a maximum matching M (Hopcroft-Karp).
3. A matched edge (u, v) puts u and v next to each other on one stream, so the matched edges form
   chains (paths of G'). One stream per chain. Cross-stream edges of E' become syncs.

Why this is right:

* Two nodes on one chain are joined by a path of G', so nodes with no path between them never
  share a stream (maximum logical concurrency).
* Whatever the assignment, the stream-order edges plus the syncs must reproduce G's reachability,
  so together they contain all of E' (a transitive-reduction edge is the only path between its
  ends). The stream-order edges that lie in E' give each node at most one successor and one
  predecessor, i.e. a bipartite matching, so at least |E'| - |M| edges of E' must be syncs.
  This assignment needs exactly that many.

4. Nimble merges chains that can share a stream: chain B can follow chain A when the tail of A
   reaches the head of B. Then every node of A reaches every node of B (total comparability, in
   stream order), so concurrency is kept; and the (tail(A), head(B)) pair is never an E' edge
   (it would extend the maximum matching M), so no E' edge joins A and B and the sync set stays
   the same. Choosing which chains to chain together is itself a minimum path cover of the
   (transitive) "can follow" relation, solved here by a second maximum matching over bit sets.

The merge is optimal for the chains of this M; another maximum matching could allow fewer
streams. The guarantees that matter (concurrency, minimum syncs) do not depend on that choice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuopt.aot.graph import Dag, descendants, iter_bits, transitive_reduction


@dataclass
class StreamAssignment:
    """Result of :func:`assign_streams`, in node indices of the input :class:`Dag`."""

    stream_of: list[int]
    num_streams: int
    reduced_edges: list[tuple[int, int]]
    matching: list[tuple[int, int]]
    syncs: list[tuple[int, int]]
    num_chains: int
    origin_stream: int = 0


def maximum_matching(n: int, edges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Maximum matching of the bipartite graph (u_L, v_R) for (u, v) in ``edges`` (Hopcroft-Karp).

    Returned as the matched ``(u, v)`` pairs, sorted.
    """
    if not edges:
        return []
    import networkx as nx
    from networkx.algorithms.bipartite import hopcroft_karp_matching

    graph = nx.Graph()
    left = [u for u in range(n)]
    graph.add_nodes_from(left)
    graph.add_nodes_from(n + v for v in range(n))
    graph.add_edges_from((u, n + v) for u, v in edges)
    matched = hopcroft_karp_matching(graph, top_nodes=left)
    return sorted((u, v - n) for u, v in matched.items() if u < n)


def chains_from_matching(n: int, matching: Sequence[tuple[int, int]]) -> list[list[int]]:
    """The chains that the matched ``(u, v)`` edges form over nodes ``0..n-1`` (a node with no
    matched edge is a chain of its own), each in path order, ordered by their head's index."""
    nxt = [-1] * n
    has_prev = [False] * n
    for u, v in matching:
        nxt[u] = v
        has_prev[v] = True
    chains = []
    for head in range(n):
        if has_prev[head]:
            continue
        chain = [head]
        while nxt[chain[-1]] >= 0:
            chain.append(nxt[chain[-1]])
        chains.append(chain)
    return chains


def chain_followers(tails: list[int], heads: list[int], reach: list[int]) -> list[int]:
    """``follow[a] = b``: chain b runs right after chain a on one stream (-1: none).

    A maximum matching in the bipartite "chain a can be followed by chain b" graph, where that
    holds when ``heads[b]`` is reachable from ``tails[a]``. The relation is transitive, so a
    maximum matching gives a minimum cover of the chains by sequences (fewest streams).
    Neighbour sets are bit sets over node indices (``reach[tail] & heads_mask``), which keeps this
    fast when most chains can follow most others. Augmenting paths (Kuhn) after a greedy start.
    """
    k = len(tails)
    head_to_chain = {h: b for b, h in enumerate(heads)}
    heads_mask = 0
    for h in heads:
        heads_mask |= 1 << h
    adj = [reach[t] & heads_mask for t in tails]
    owner: dict[int, int] = {}  # head node index -> chain a that it follows
    follow = [-1] * k
    # Greedy start: the earliest free head (lowest index) reachable from each tail.
    for a in range(k):
        free = adj[a]
        for h in iter_bits(free):
            if h not in owner:
                owner[h] = a
                follow[a] = head_to_chain[h]
                break
    for a in range(k):
        if follow[a] >= 0 or not adj[a]:
            continue
        # Iterative DFS for an augmenting path from chain a.
        visited = 0
        stack: list[tuple[int, int]] = [(a, -1)]  # (chain, head taken to reach it)
        found = False
        while stack and not found:
            cur, _ = stack[-1]
            cand = adj[cur] & ~visited
            if not cand:
                stack.pop()
                continue
            low = cand & -cand
            h = low.bit_length() - 1
            visited |= low
            if h not in owner:
                # Flip the path: each chain on the stack takes the head that led to the next one.
                stack.append((-1, h))
                for idx in range(len(stack) - 1):
                    chain_here = stack[idx][0]
                    head_next = stack[idx + 1][1]
                    owner[head_next] = chain_here
                    follow[chain_here] = head_to_chain[head_next]
                found = True
            else:
                stack.append((owner[h], h))
    return follow


def assign_streams(
    dag: Dag, weight: Sequence[float] | None = None, *, merge: bool = True
) -> StreamAssignment:
    """Nimble's stream assignment for ``dag`` (see the module docstring).

    ``weight`` (per node, e.g. estimated time) only decides which stream is the origin stream 0
    (the heaviest; the caller's stream, so the most work runs without a fork); by default nodes
    count 1 each. Other streams are numbered by their first node in the order.
    """
    n = len(dag)
    if n == 0:
        return StreamAssignment([], 0, [], [], [], 0)
    reach = descendants(dag)
    reduced = transitive_reduction(dag, reach)
    matching = maximum_matching(n, reduced)
    chains = chains_from_matching(n, matching)
    if merge and len(chains) > 1:
        tails = [c[-1] for c in chains]
        heads = [c[0] for c in chains]
        follow = chain_followers(tails, heads, reach)
        followed = {b for b in follow if b >= 0}
        streams = []
        for a in range(len(chains)):
            if a in followed:
                continue
            seq: list[int] = []
            c = a
            while c >= 0:
                seq.extend(chains[c])
                c = follow[c]
            streams.append(sorted(seq))
    else:
        streams = [list(c) for c in chains]
    w = weight if weight is not None else [1.0] * n
    heaviest = max(
        range(len(streams)), key=lambda s: (sum(w[i] for i in streams[s]), -streams[s][0])
    )
    ordered = [streams[heaviest]] + sorted(
        (s for k, s in enumerate(streams) if k != heaviest), key=lambda s: s[0]
    )
    stream_of = [0] * n
    for sid, nodes in enumerate(ordered):
        for i in nodes:
            stream_of[i] = sid
    syncs = sorted(
        ((u, v) for u, v in reduced if stream_of[u] != stream_of[v]), key=lambda e: (e[1], e[0])
    )
    return StreamAssignment(
        stream_of=stream_of,
        num_streams=len(ordered),
        reduced_edges=reduced,
        matching=matching,
        syncs=syncs,
        num_chains=len(chains),
    )
