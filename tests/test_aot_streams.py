"""Nimble's stream assignment against brute force on random small DAGs (no torch needed).

The brute force does not use the theorem: it enumerates every partition of the nodes into
streams that keeps maximum logical concurrency (each stream totally ordered by reachability),
and for each finds the smallest set of sync edges that, with the streams' order, implies every
dependence, by trying all sync sets of size 0, 1, 2, ...
"""

from __future__ import annotations

import itertools
import random

import networkx as nx
import pytest

from gpuopt.aot.graph import Dag, descendants, longest_path, transitive_reduction
from gpuopt.aot.plan import build_plan
from gpuopt.aot.streams import assign_streams, chain_followers, maximum_matching


def random_dag(rng: random.Random, n: int, p: float) -> Dag:
    names = [f"v{i}" for i in range(n)]
    edges = [(names[i], names[j]) for i in range(n) for j in range(i + 1, n) if rng.random() < p]
    return Dag.from_edges(names, edges)


def closure_bits(n: int, edges: list[tuple[int, int]]) -> list[int]:
    """Reachability of an edge set whose edges go from lower to higher index."""
    succ: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges:
        succ[u].append(v)
    reach = [0] * n
    for i in range(n - 1, -1, -1):
        for j in succ[i]:
            reach[i] |= reach[j] | (1 << j)
    return reach


def set_partitions(items: list[int]):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in set_partitions(rest):
        yield [[first], *part]
        for k in range(len(part)):
            yield part[:k] + [[first, *part[k]]] + part[k + 1 :]


def brute_force_min_syncs(dag: Dag) -> int:
    """Fewest syncs over all maximum-concurrency stream assignments, by exhaustive search."""
    n = len(dag)
    reach = closure_bits(n, dag.edges())
    comparable = lambda a, b: bool((reach[a] >> b) & 1 or (reach[b] >> a) & 1)  # noqa: E731
    true_edges = dag.edges()
    candidates_by_part = []
    for part in set_partitions(list(range(n))):
        if not all(comparable(a, b) for block in part for a, b in itertools.combinations(block, 2)):
            continue
        stream = {}
        chain_edges = []
        for sid, block in enumerate(part):
            block = sorted(block)
            for a, b in zip(block, block[1:], strict=False):
                chain_edges.append((a, b))
            for a in block:
                stream[a] = sid
        # A sync may only join two ordered nodes on different streams (else it adds a false
        # dependence).
        cands = [
            (a, b)
            for a in range(n)
            for b in range(n)
            if stream[a] != stream[b] and (reach[a] >> b) & 1
        ]
        candidates_by_part.append((chain_edges, cands))
    for k in range(0, len(true_edges) + 1):
        for chain_edges, cands in candidates_by_part:
            for syncs in itertools.combinations(cands, k):
                r = closure_bits(n, chain_edges + list(syncs))
                if all((r[u] >> v) & 1 for u, v in true_edges):
                    return k
    raise AssertionError("unreachable: the true edges themselves always suffice")


def check_assignment(dag: Dag) -> None:
    sa = assign_streams(dag)
    n = len(dag)
    reach = descendants(dag)
    # Maximum logical concurrency: nodes with no path between them never share a stream.
    for i in range(n):
        for j in range(i + 1, n):
            if sa.stream_of[i] == sa.stream_of[j]:
                assert (reach[i] >> j) & 1, (
                    f"{i} and {j} share stream {sa.stream_of[i]} but are independent"
                )
    # Every dependence is ordered by stream order plus syncs.
    order_edges = []
    for s in range(sa.num_streams):
        members = [i for i in range(n) if sa.stream_of[i] == s]
        order_edges += list(zip(members, members[1:], strict=False))
    r = closure_bits(n, order_edges + list(sa.syncs))
    for u, v in dag.edges():
        assert (r[u] >> v) & 1, f"dependence {u}->{v} is not ordered"
    # Syncs are exactly the cross-stream edges of the reduction, |E'| - |M| of them.
    assert len(sa.syncs) == len(sa.reduced_edges) - len(sa.matching)
    assert all(sa.stream_of[u] != sa.stream_of[v] for u, v in sa.syncs)
    # Stream ids are dense.
    assert set(sa.stream_of) == set(range(sa.num_streams)) or n == 0


@pytest.mark.slow  # seconds of CPU: out of make test-fast
@pytest.mark.parametrize("seed", range(60))
def test_minimum_syncs_match_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 7)
    dag = random_dag(rng, n, rng.choice([0.2, 0.35, 0.5, 0.7]))
    check_assignment(dag)
    sa = assign_streams(dag)
    assert len(sa.syncs) == brute_force_min_syncs(dag)


def test_brute_force_can_disagree_with_a_worse_assignment() -> None:
    """The brute force is a real check: a plan with a non-maximum matching needs more syncs."""
    # Diamond a->b, a->c, b->d, c->d plus a->... : a chain a-b-d with c apart needs 2 syncs;
    # putting every node alone (no matching) needs 4.
    names = ["a", "b", "c", "d"]
    dag = Dag.from_edges(names, [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])
    assert brute_force_min_syncs(dag) == 2
    assert len(assign_streams(dag).syncs) == 2
    reduced = transitive_reduction(dag)
    assert len(reduced) - 0 == 4  # an empty matching would leave all four as syncs


@pytest.mark.parametrize("seed", range(60))
def test_assignment_properties_on_larger_random_dags(seed: int) -> None:
    rng = random.Random(1000 + seed)
    dag = random_dag(rng, rng.randint(5, 60), rng.choice([0.05, 0.1, 0.3]))
    check_assignment(dag)


def test_transitive_reduction_matches_networkx() -> None:
    rng = random.Random(7)
    for _ in range(50):
        dag = random_dag(rng, rng.randint(1, 30), rng.random() * 0.5)
        g = nx.DiGraph()
        g.add_nodes_from(range(len(dag)))
        g.add_edges_from(dag.edges())
        assert sorted(transitive_reduction(dag)) == sorted(nx.transitive_reduction(g).edges())


def test_matching_is_maximum_against_networkx_max_weight() -> None:
    rng = random.Random(3)
    for _ in range(30):
        dag = random_dag(rng, rng.randint(2, 25), 0.2)
        reduced = transitive_reduction(dag)
        m = maximum_matching(len(dag), reduced)
        g = nx.Graph()
        g.add_edges_from((("L", u), ("R", v)) for u, v in reduced)
        assert len(m) == len(nx.max_weight_matching(g, maxcardinality=True))
        assert len({u for u, _ in m}) == len(m) == len({v for _, v in m})


def brute_force_min_sequences(chains: list[list[int]], reach: list[int]) -> int:
    """Fewest groups of chains such that each group is totally ordered (tail reaches next head)."""
    best = len(chains)
    for part in set_partitions(list(range(len(chains)))):
        ok = True
        for block in part:
            block = sorted(block, key=lambda c: chains[c][0])
            for a, b in zip(block, block[1:], strict=False):
                if not (reach[chains[a][-1]] >> chains[b][0]) & 1:
                    ok = False
        if ok:
            best = min(best, len(part))
    return best


@pytest.mark.parametrize("seed", range(25))
def test_merge_uses_fewest_streams_for_the_chains(seed: int) -> None:
    rng = random.Random(500 + seed)
    dag = random_dag(rng, rng.randint(4, 12), rng.choice([0.15, 0.3]))
    reach = descendants(dag)
    unmerged = assign_streams(dag, merge=False)
    chains = [
        [i for i in range(len(dag)) if unmerged.stream_of[i] == s]
        for s in range(unmerged.num_streams)
    ]
    if len(chains) > 7:
        chains = chains[:7]  # keep the partition count small; the merge runs on the same subset
    follow = chain_followers([c[-1] for c in chains], [c[0] for c in chains], reach)
    merged_count = len(chains) - sum(1 for f in follow if f >= 0)
    assert merged_count == brute_force_min_sequences(chains, reach)
    full = assign_streams(dag)
    assert full.num_streams <= unmerged.num_streams
    assert len(full.syncs) == len(unmerged.syncs)  # merging never adds syncs


def test_merge_is_needed_and_happens() -> None:
    """Two parallel branches followed by two more: the matching gives 4 chains, merging 2
    streams."""
    edges = [
        ("a", "b1"),
        ("a", "c1"),
        ("b1", "m"),
        ("c1", "m"),
        ("m", "b2"),
        ("m", "c2"),
        ("b2", "z"),
        ("c2", "z"),
    ]
    names = ["a", "b1", "c1", "m", "b2", "c2", "z"]
    plan = build_plan(names, edges)
    unmerged = build_plan(names, edges, merge=False)
    assert unmerged.num_streams == 3
    assert plan.num_streams == 2
    assert len(plan.syncs) == len(unmerged.syncs) == 4
    # The side stream holds one branch of each fork, in order.
    side = [n for n in plan.order if plan.streams[n] == 1]
    assert len(side) == 2 and side[0] in ("b1", "c1") and side[1] in ("b2", "c2")


def test_independent_nodes_each_get_a_stream() -> None:
    plan = build_plan(["a", "b", "c"], [])
    assert plan.num_streams == 3 and plan.syncs == []
    assert plan.fork == [1, 2] and plan.join == [1, 2]


def test_origin_is_the_heaviest_stream() -> None:
    names = ["a", "b", "c"]
    plan = build_plan(names, [("a", "b")], weight=[1.0, 1.0, 5.0])
    assert plan.streams["c"] == 0


def test_longest_path() -> None:
    dag = Dag.from_edges(["a", "b", "c", "d"], [("a", "b"), ("b", "d"), ("a", "c"), ("c", "d")])
    length, path = longest_path(dag, [1.0, 5.0, 2.0, 1.0])
    assert length == 7.0 and path == [0, 1, 3]


def test_five_thousand_nodes_plan() -> None:
    """A 5,000-node graph plans to a correct sync count. How fast is a benchmark's question
    (benchmarks/bench_aot.py, docs/bench-aot.md: target < 2 s), not a test's."""
    rng = random.Random(0)
    n = 5000
    names = [f"n{i}" for i in range(n)]
    edges = set()
    for v in range(1, n):
        for _ in range(rng.randint(1, 3)):
            edges.add((names[v - rng.randint(1, min(v, 30))], names[v]))
    plan = build_plan(names, sorted(edges))
    assert len(plan.nodes) == n
    assert len(plan.syncs) == plan.stats["reduced_edges"] - plan.stats["matching"]
