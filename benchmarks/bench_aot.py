"""Benchmarks for gpuopt.aot (ahead-of-time multi-stream scheduling).

    python benchmarks/bench_aot.py [--quick] [--json FILE]

Part 1 (measured): wall time to plan large synthetic DAGs (5,000 nodes and more): transitive
reduction, Hopcroft-Karp matching, chain merging, on this machine.

Part 2 (measured + estimated): for each in-tree zoo model at full size (batch 1): capture time
(measured), graph sizes, streams, syncs (exact properties of the plan), a CPU correctness check
(measured: scheduled output vs eager, and the vector-clock simulator on random interleavings),
and the modelled eager / single-stream CUDA graph / multi-stream CUDA graph times on the H100,
A100 and V100 profiles. The modelled times are ESTIMATES from gpuopt.aot.costmodel, not
measurements; the model's label is printed with them.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpuopt.aot.graph import Dag, descendants, transitive_reduction  # noqa: E402
from gpuopt.aot.plan import build_plan  # noqa: E402
from gpuopt.aot.streams import chain_followers, chains_from_matching, maximum_matching  # noqa: E402

# Nimble (Kwon et al., NeurIPS 2020), Table/Figure for inference on V100, batch 1: speedup of
# Nimble over PyTorch eager. Reference points only; nothing here reproduces them.
PAPER_V100 = {"inception_v3": 5.16, "nasnet_a_mobile": 22.34}


def synthetic_dags(n: int) -> dict[str, tuple[list[str], list[tuple[str, str]]]]:
    """Three shapes of 5,000-node DAGs: windowed random, stacked NASNet-like cells, wide layers."""
    rng = random.Random(0)
    out: dict[str, tuple[list[str], list[tuple[str, str]]]] = {}
    names = [f"n{i}" for i in range(n)]
    edges = set()
    for v in range(1, n):
        for _ in range(rng.randint(1, 3)):
            edges.add((names[v - rng.randint(1, min(v, 30))], names[v]))
    out["random-window30"] = (names, sorted(edges))
    # Cells: two inputs, 10 ops combining them pairwise, a concat; repeated.
    names, edges2 = [], []
    prev, cur = "in0", "in1"
    names += [prev, cur]
    edges2.append((prev, cur))
    c = 0
    while len(names) < n - 12:
        ops = []
        for k in range(10):
            op = f"c{c}_op{k}"
            names.append(op)
            edges2.append((rng.choice([prev, cur] + ops[-2:]), op))
            ops.append(op)
        out_node = f"c{c}_cat"
        names.append(out_node)
        edges2 += [(o, out_node) for o in ops]
        prev, cur = cur, out_node
        c += 1
    out["nasnet-like-cells"] = (names, edges2)
    # Wide layers: 50 layers of 100 nodes, each reading 2 random nodes of the previous layer.
    names3, edges3 = [], []
    width = 100
    for layer in range(n // width):
        for k in range(width):
            v = f"l{layer}_{k}"
            names3.append(v)
            if layer:
                for u in rng.sample(range(width), 2):
                    edges3.append((f"l{layer - 1}_{u}", v))
    out["wide-layers"] = (names3, edges3)
    return out


def bench_planning(n: int, repeats: int) -> list[dict[str, Any]]:
    rows = []
    for label, (names, edges) in synthetic_dags(n).items():
        times, parts = [], {"reduce": [], "match": [], "merge": []}
        plan = None
        for _ in range(repeats):
            t0 = time.perf_counter()
            plan = build_plan(names, edges)
            times.append(time.perf_counter() - t0)
            # Phase breakdown, timed separately.
            dag = Dag.from_edges(names, edges)
            t1 = time.perf_counter()
            reach = descendants(dag)
            red = transitive_reduction(dag, reach)
            t2 = time.perf_counter()
            m = maximum_matching(len(dag), red)
            t3 = time.perf_counter()
            ch = chains_from_matching(len(dag), m)
            chain_followers([x[-1] for x in ch], [x[0] for x in ch], reach)
            t4 = time.perf_counter()
            parts["reduce"].append(t2 - t1)
            parts["match"].append(t3 - t2)
            parts["merge"].append(t4 - t3)
        assert plan is not None
        rows.append(
            {
                "graph": label,
                "nodes": len(names),
                "edges": len(edges),
                "reduced_edges": plan.stats["reduced_edges"],
                "chains": plan.stats["chains"],
                "streams": plan.num_streams,
                "syncs": len(plan.syncs),
                "plan_s_median": statistics.median(times),
                "plan_s_max": max(times),
                **{f"{k}_s_median": statistics.median(v) for k, v in parts.items()},
            }
        )
    return rows


def bench_networkx_reduction(n: int) -> dict[str, Any]:
    """The same transitive reduction with networkx (the tests' reference), timed once."""
    import networkx as nx

    names, edges = synthetic_dags(n)["random-window30"]
    dag = Dag.from_edges(names, edges)
    g = nx.DiGraph()
    g.add_nodes_from(range(len(dag)))
    g.add_edges_from(dag.edges())
    t0 = time.perf_counter()
    ref = nx.transitive_reduction(g)
    nx_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    ours = transitive_reduction(dag)
    ours_s = time.perf_counter() - t1
    assert sorted(ours) == sorted(ref.edges())
    return {"graph": "random-window30", "networkx_s": nx_s, "bitset_s": ours_s}


def bench_zoo(size: str, sim_seeds: int) -> list[dict[str, Any]]:
    import torch

    from gpuopt.aot import schedule, zoo

    rows = []
    for name, factory in zoo.ZOO.items():
        model, inputs = factory(size)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sm = schedule(model, inputs, streams="multi")  # Nimble's plan, as planned
        capture_s = time.perf_counter() - t0
        plan = sm.plan
        with torch.no_grad():
            ref = model(*inputs)
            got = sm(*inputs)
        diff = float((got - ref).abs().max())
        sims_ok = 0
        t1 = time.perf_counter()
        for seed in range(sim_seeds):
            rep = sm.simulate(*inputs, seed=seed)
            if rep.ok and torch.allclose(rep.outputs, ref, rtol=1e-4, atol=1e-5):
                sims_ok += 1
        sim_s = (time.perf_counter() - t1) / max(sim_seeds, 1)
        row: dict[str, Any] = {
            "model": name,
            "size": size,
            "capture": plan.capture,
            "capture_s": capture_s,
            "nodes": len(plan.nodes),
            "kernels": sum(1 for op in plan.ops.values() if op["kind"] == "kernel"),
            "edges": plan.stats["edges"],
            "kernel_edges": plan.stats["kernel_edges"],
            "reduced_edges": plan.stats["reduced_edges"],
            "matching": plan.stats["matching"],
            "chains": plan.stats["chains"],
            "streams": plan.num_streams,
            "syncs": len(plan.syncs),
            "max_abs_diff_vs_eager": diff,
            "simulated_runs_ok": f"{sims_ok}/{sim_seeds}",
            "simulated_run_s": sim_s,
            "estimates": {},
        }
        for prof in ("h100", "a100", "v100"):
            est = sm.estimate(prof)
            row["estimates"][prof] = est.to_dict()
        rows.append(row)
    return rows


def print_report(
    planning: list[dict[str, Any]], nx_row: dict[str, Any] | None, zoo_rows: list[dict[str, Any]]
) -> None:
    print("## Planning time (measured)\n")
    print(
        "| graph | nodes | edges | E' | chains | streams | syncs | plan median s | max s | "
        "reduce s | match s | merge s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in planning:
        print(
            f"| {r['graph']} | {r['nodes']} | {r['edges']} | {r['reduced_edges']} | "
            f"{r['chains']} | {r['streams']} | {r['syncs']} | {r['plan_s_median']:.3f} | "
            f"{r['plan_s_max']:.3f} | {r['reduce_s_median']:.3f} | "
            f"{r['match_s_median']:.3f} | {r['merge_s_median']:.3f} |"
        )
    if nx_row:
        print(
            f"\nTransitive reduction of {nx_row['graph']}, same run: "
            f"networkx {nx_row['networkx_s']:.2f} s, "
            f"bit sets {nx_row['bitset_s']:.3f} s (identical edge sets)."
        )
    print("\n## Zoo: plan (exact) and CPU checks (measured)\n")
    print(
        "| model | capture | capture s | nodes | kernels | E (all nodes) | E (kernels) | E' | M "
        "| chains | streams | syncs | critical path (nodes) | max abs diff vs eager "
        "| simulated runs ok |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in zoo_rows:
        cp = r["estimates"]["h100"]["critical_path_nodes"]
        print(
            f"| {r['model']} | {r['capture']} | {r['capture_s']:.1f} | {r['nodes']} | "
            f"{r['kernels']} | {r['edges']} | {r['kernel_edges']} | "
            f"{r['reduced_edges']} | {r['matching']} | {r['chains']} | {r['streams']} | "
            f"{r['syncs']} | {cp} ({cp / r['nodes']:.0%}) | {r['max_abs_diff_vs_eager']:.2g} | "
            f"{r['simulated_runs_ok']} |"
        )
    print("\n## Zoo: estimated times (model, not measured)\n")
    print(
        "| model | profile | eager | 1 graph | multi-stream | critical-path share | graph/eager "
        "| multi/eager | multi over graph | paper (V100, Nimble/eager) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in zoo_rows:
        for prof, e in r["estimates"].items():
            paper = PAPER_V100.get(r["model"]) if prof == "v100" else None
            print(
                f"| {r['model']} | {prof} | {e['eager_s'] * 1e3:.3f} ms | "
                f"{e['graph_s'] * 1e3:.3f} ms | "
                f"{e['multistream_s'] * 1e3:.3f} ms | {e['critical_path_share']:.0%} | "
                f"{e['speedup_graph_over_eager']:.2f}x | "
                f"{e['speedup_multistream_over_eager']:.2f}x | "
                f"{e['speedup_multistream_over_graph']:.2f}x | {f'{paper:.2f}x' if paper else ''} |"
            )
    if zoo_rows:
        print(f"\nestimated (model: {zoo_rows[0]['estimates']['h100']['model']})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small zoo models, fewer repeats")
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sim-seeds", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    import os

    import torch

    print(
        f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} CPUs, "
        f"python {platform.python_version()}, torch {torch.__version__}, "
        f"threads {torch.get_num_threads()}\n"
    )
    planning = bench_planning(args.nodes, 2 if args.quick else args.repeats)
    nx_row = None if args.quick else bench_networkx_reduction(args.nodes)
    zoo_rows = bench_zoo("small" if args.quick else "full", 1 if args.quick else args.sim_seeds)
    print_report(planning, nx_row, zoo_rows)
    if args.json:
        args.json.write_text(
            json.dumps({"planning": planning, "networkx": nx_row, "zoo": zoo_rows}, indent=1)
        )


if __name__ == "__main__":
    main()
