"""Every vectorize pattern, the loop as written against the codemod's own rewrite of it, timed
side by side.

    python benchmarks/bench_vectorize.py [--pairs 21] [--threads 1] [--json FILE]

For each case, the loop's text goes through ``rewrite_vectorize`` (the code ``gpuopt optimize``
would write), both are compiled, and each timed run gets fresh inputs from the case's setup
(untimed). Runs alternate old, new, new, old, ... so drift hits both sides; the speedup is the
median of the per-pair ratios, with their 10th-90th percentiles as the spread, and the results
are checked equal (bit for bit for masks, counts and maxima; sums within float rounding) before
anything is timed.

``--threads 1`` (the default) pins torch to one intra-op thread: the machine is shared (2
cores, other engineers' test runs), and with two threads an op large enough to be split waits
for a second thread the scheduler may not run for milliseconds — the numbers would measure the
load, not the code. ``--threads 2`` runs the same with both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gpuopt.fixes.loops.vectorize import rewrite_vectorize


@dataclass
class Case:
    name: str
    setup: str  # builds the inputs (untimed, fresh for every run)
    loop: str  # the loop as a user writes it
    result: str  # the name holding what the loop computes
    exact: bool = True


HEAD = "import numpy as np\nimport torch\n"
PURE = "def encode(v, w):\n    return torch.tanh(v * w).sum(-1)\n"
CASES = [
    Case(
        "class-masks: 80 classes, one 512×512 map (the seminar's)",
        "seg = torch.randint(0, 80, (512, 512)); m = torch.zeros(80, 512, 512)",
        "for c in range(80):\n    m[c] = seg == c\n",
        "m",
    ),
    Case(
        "class-masks: 80 classes, 4 maps of 32×32 (examples/segmentation_loops.py)",
        "seg = torch.randint(0, 80, (4, 32, 32)); m = torch.zeros(4, 80, 32, 32)",
        "for c in range(80):\n    m[:, c] = seg == c\n",
        "m",
    ),
    Case(
        "class-masks: 80 classes, 8 maps of 64×64",
        "seg = torch.randint(0, 80, (8, 64, 64)); m = torch.zeros(8, 80, 64, 64)",
        "for c in range(80):\n    m[:, c] = seg == c\n",
        "m",
    ),
    Case(
        "row-updates: 1024 rows of 64",
        "x = torch.randn(1024, 64); w = torch.randn(64); out = torch.empty(1024, 64)",
        "for i in range(len(x)):\n    out[i] = torch.relu(x[i] * w + 1)\n",
        "out",
    ),
    Case(
        "gathers: 1024 rows of 64 through an index",
        "t = torch.randn(5000, 64); ids = torch.randint(0, 5000, (1024,)); "
        "out = torch.empty(1024, 64)",
        "for i in range(len(ids)):\n    out[i] = t[ids[i]]\n",
        "out",
    ),
    Case(
        "scatter-add: 4096 labels into 100 counts",
        "labels = torch.randint(0, 100, (4096,)); counts = torch.zeros(100, dtype=torch.long)",
        "for i in range(len(labels)):\n    counts[labels[i]] += 1\n",
        "counts",
    ),
    Case(
        "sums: 1024 rows of 64",
        "x = torch.randn(1024, 64); w = torch.randn(64); total = torch.zeros(64)",
        "for i in range(len(x)):\n    total = total + x[i] * w\n",
        "total",
        exact=False,
    ),
    Case(
        "maxima: 1024 rows of 64",
        "x = torch.randn(1024, 64); best = torch.full((64,), -1e9)",
        "for i in range(len(x)):\n    best = torch.maximum(best, x[i])\n",
        "best",
    ),
    Case(
        "stacks: 1024 rows of 64",
        "x = torch.randn(1024, 64)",
        "z = torch.stack([x[i] * 2 for i in range(len(x))])\n",
        "z",
    ),
    Case(
        "numpy-gathers: nanoGPT's get_batch, 64 windows of 256 tokens from 1M",
        "data = np.random.default_rng(0).integers(0, 65, 1_000_000).astype(np.uint16); "
        "ix = torch.randint(len(data) - 256, (64,))",
        "x = torch.stack([torch.from_numpy((data[i:i+256]).astype(np.int64)) for i in ix])\n",
        "x",
    ),
    Case(
        "vmap: a pure function on 1024 rows of 64",
        "x = torch.randn(1024, 64); w = torch.randn(64); outs = []",
        "for row in x:\n    outs.append(encode(row, w))\n",
        "outs",
        exact=False,
    ),
]


def _lines(text: str) -> list[int]:
    return [
        i
        for i, t in enumerate(text.splitlines(), 1)
        if t.lstrip().startswith("for ") or "torch.stack([" in t
    ]


def _inputs(case: Case, seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    ns: dict[str, Any] = {"torch": torch, "np": np}
    exec(case.setup, ns)
    return ns


def _run(code: Any, case: Case, seed: int) -> tuple[float, Any, float]:
    ns = _inputs(case, seed)
    t, c = time.perf_counter(), time.thread_time()
    exec(code, ns)
    return time.perf_counter() - t, ns[case.result], time.thread_time() - c


def _same(a: Any, b: Any, exact: bool) -> bool:
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y, exact) for x, y in zip(a, b, strict=True))
    return bool(torch.equal(a, b) if exact else torch.allclose(a, b, rtol=1e-4, atol=1e-5))


def bench(case: Case, pairs: int) -> dict[str, Any]:
    text = HEAD + PURE + case.loop  # as in a user's file
    rewrite = rewrite_vectorize(text, _lines(text))
    if not rewrite.changes:
        raise SystemExit(f"{case.name}: not rewritten: {rewrite.skipped}")
    old = compile(text, "<loop>", "exec")
    new = compile(rewrite.source, "<rewrite>", "exec")
    _, a, _ = _run(old, case, 0)
    _, b, _ = _run(new, case, 0)
    if not _same(a, b, case.exact):
        raise SystemExit(f"{case.name}: the rewrite's result differs")
    for _ in range(2):  # warm-up
        _run(old, case, 1), _run(new, case, 1)
    before, after, ratios, cpu = [], [], [], []
    for i in range(pairs):
        order = (old, new) if i % 2 == 0 else (new, old)
        t = {id(code): _run(code, case, i) for code in order}
        before.append(t[id(old)][0])
        after.append(t[id(new)][0])
        ratios.append(t[id(old)][0] / t[id(new)][0])
        cpu.append(t[id(old)][2] / max(t[id(new)][2], 1e-6))
    q = statistics.quantiles(ratios, n=10)
    return {
        "case": case.name,
        "pattern": rewrite.changes[0].pattern,
        "before_ms": round(statistics.median(before) * 1000, 3),
        "after_ms": round(statistics.median(after) * 1000, 3),
        "speedup": round(statistics.median(ratios), 2),
        "p10": round(q[0], 2),
        "p90": round(q[-1], 2),
        "cpu_speedup": round(statistics.median(cpu), 2),
        "rewrite": rewrite.source.removeprefix(HEAD + PURE).strip(),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=21)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=str, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]
    print(f"torch threads {args.threads}, load average {load:.2f} on {os.cpu_count()} cores")
    print(f"{'case':<72} {'before':>9} {'after':>9} {'speedup':>8}  p10-p90  (CPU time)")
    rows = []
    for case in CASES:
        row = bench(case, args.pairs)
        rows.append(row)
        print(
            f"{row['case']:<72} {row['before_ms']:>7.2f}ms {row['after_ms']:>7.3f}ms "
            f"{row['speedup']:>7.1f}x  {row['p10']}-{row['p90']}  ({row['cpu_speedup']}x)"
        )
    load_end = os.getloadavg()[0]
    print(f"load average at the end {load_end:.2f}")
    if args.json:
        meta = {"threads": args.threads, "pairs": args.pairs, "load": [load, load_end]}
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
