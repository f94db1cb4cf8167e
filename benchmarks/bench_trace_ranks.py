"""Benchmark: ``gpuopt report`` on a folder of many per-rank traces, in worker processes and one
rank after another; ``--summary-only`` and the merge of the summaries.

The ranks: the shared multi-rank traces (``hta/trace_filter``: 2 ranks of a 128-rank job,
~1.7 MB of JSON each) as they are, and synthetic N-rank folders built from them in a temporary
folder (never in the repository): rank r is sampled rank r % 2, with ``distributedInfo`` saying
rank r of N. With ``--big``, also a folder built the same way from ``nccl_data`` (9.8 MB a rank,
gzipped). Every command is the console script of a wheel install (``benchmarks/installed.py``),
each run a fresh process; the commands of one folder are interleaved (parallel, one after
another, parallel, ...) and each takes the median of ``--repeat`` runs. Peak memory: the largest
of the process tree's PSS sampled every 5 ms (``bench_trace.measure``; workers count once per
page).

    python benchmarks/bench_trace_ranks.py                       # 2, 8, 16, 32, 64 ranks
    python benchmarks/bench_trace_ranks.py --ranks 64 --repeat 5 --big
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import tempfile
from pathlib import Path

from bench_trace import SHARED, measure
from installed import revision_venv, user_venv

SAMPLED = [SHARED / "hta" / "trace_filter" / f"sampled_rank-{r}.json.gz" for r in (0, 1)]
BIG = SHARED / "hta" / "nccl_parser_config" / "nccl_data.json.gz"


def make_folder(root: Path, sources: list[Path], n: int) -> Path:
    """``n`` ranks, rank r from ``sources[r % len(sources)]``, its distributedInfo rewritten."""
    out = root / f"{sources[0].parent.name}-{n}ranks"
    if out.exists():
        return out
    out.mkdir(parents=True)
    docs = [json.loads(gzip.decompress(s.read_bytes())) for s in sources]
    for r in range(n):
        doc = docs[r % len(docs)]
        doc["distributedInfo"] = dict(doc.get("distributedInfo") or {}, rank=r, world_size=n)
        text = json.dumps(doc).encode()
        (out / f"rank-{r}.json.gz").write_bytes(gzip.compress(text, compresslevel=1))
    return out


_SPIN = (
    "import os, sys\n"
    "n = int(sys.argv[1])\n"
    "for _ in range(n - 1):\n"
    "    if os.fork() == 0:\n"
    "        break\n"
    "x = 0\n"
    "for i in range(4_000_000):\n"
    "    x += i * i\n"
    "while True:\n"
    "    try:\n"
    "        os.wait()\n"
    "    except ChildProcessError:\n"
    "        break\n"
)


def machine_scaling(python: str, repeat: int) -> float | None:
    """What two processes get done here now, against one: the time of one CPU-bound loop
    over the time of two copies of it side by side, times two (2.0 on two idle cores; the
    other engineers' work lowers it). The ceiling of the parallel speedup, measured alongside."""
    ratios = []
    for _ in range(repeat):
        one = measure([python, "-c", _SPIN, "1"], 60)["wall_s"]
        two = measure([python, "-c", _SPIN, "2"], 60)["wall_s"]
        if one and two:
            ratios.append(2 * one / two)
    return statistics.median(ratios) if ratios else None


def run(label: str, cmds: dict[str, list[str]], repeat: int, timeout: float) -> dict[str, dict]:
    """Each command ``repeat`` times, interleaved, then once more with memory sampled."""
    runs: dict[str, list[dict]] = {k: [] for k in cmds}
    for _ in range(repeat):
        for k, c in cmds.items():
            runs[k].append(measure(c, timeout))
    out = {}
    for k, c in cmds.items():
        mem = measure(c, timeout, memory=True)
        walls = [r["wall_s"] for r in runs[k] if r.get("rc") == 0 and r["wall_s"] is not None]
        bad = [r for r in runs[k] + [mem] if r.get("rc") != 0]
        out[k] = {
            "median_s": statistics.median(walls) if walls else None,
            "min_s": min(walls) if walls else None,
            "max_s": max(walls) if walls else None,
            "peak_mb": (mem.get("peak_rss_bytes") or 0) / 1e6,
            "failed": [r.get("stderr") for r in bad],
        }
        print(f"{label} {k}: {out[k]}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--ranks", type=int, action="append", help="rank counts (default 2..64)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--big", action="store_true", help="also nccl_data-based folders")
    ap.add_argument("--timeout", type=float, default=1200)
    ap.add_argument(
        "--compare-rev",
        metavar="REV",
        help="also gpuopt as of git revision REV on each folder, interleaved (before a change)",
    )
    args = ap.parse_args()
    counts = args.ranks or [2, 8, 16, 32, 64]
    gpuopt = str(user_venv() / "gpuopt")
    old = str(revision_venv(args.compare_rev) / "gpuopt") if args.compare_rev else None
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpuopt-ranks-") as tmp:
        root = Path(tmp)
        sets = [("trace_filter", SAMPLED)] + ([("nccl_data", [BIG])] if args.big else [])
        for name, sources in sets:
            for n in counts:
                folder = sources[0].parent if n == 2 and name == "trace_filter" else None
                folder = folder or make_folder(root / name, sources, n)
                summaries = root / "summaries" / f"{name}-{n}"
                cmds = {
                    "parallel": [gpuopt, "report", str(folder), "--format", "json"],
                    "one after another": [
                        gpuopt,
                        "report",
                        str(folder),
                        "--format",
                        "json",
                        "--jobs",
                        "1",
                    ],
                }
                if old is not None:
                    before = [old, "report", str(folder), "--format", "json"]
                    cmds[f"at {args.compare_rev}"] = before
                res = run(f"{name} {n}", cmds, args.repeat, args.timeout)
                # --summary-only (each node's step) and the merge (one machine's), once each
                summ = measure(
                    [gpuopt, "report", str(folder), "--summary-only", "-o", str(summaries)],
                    args.timeout,
                    memory=True,
                )
                size = sum(f.stat().st_size for f in summaries.glob("*.summary.json"))
                merge = run(
                    f"{name} {n} merge",
                    {"merge": [gpuopt, "report", str(summaries), "--format", "json"]},
                    args.repeat,
                    args.timeout,
                )["merge"]
                par, seq = res["parallel"], res["one after another"]
                scaling = machine_scaling(str(Path(gpuopt).parent / "python"), args.repeat)
                print(f"{name} {n}: two processes do {scaling}x the work of one now", flush=True)
                rows.append(
                    {
                        "set": name,
                        "ranks": n,
                        "json_mb": round(
                            sum(len(gzip.decompress(f.read_bytes())) for f in folder.glob("*.gz"))
                            / 1e6,
                            1,
                        ),
                        "parallel": par,
                        "sequential": seq,
                        "speedup": round(seq["median_s"] / par["median_s"], 2)
                        if par["median_s"] and seq["median_s"]
                        else None,
                        "machine_scaling": scaling,
                        "before": res.get(f"at {args.compare_rev}"),
                        "summary_only_s": summ.get("wall_s"),
                        "summary_only_peak_mb": (summ.get("peak_rss_bytes") or 0) / 1e6,
                        "summaries_kb": round(size / 1e3),
                        "merge": merge,
                    }
                )
    print(
        "\n| traces | ranks | JSON MB | parallel s (median; min–max) | one after another s "
        "| speedup | 2 processes' throughput now | parallel s per rank | peak MB parallel "
        "| peak MB one after another "
        "| --summary-only s | summaries kB | merge s | merge peak MB | before: s, peak MB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        p, s, m = r["parallel"], r["sequential"], r["merge"]

        def f(x: float | None, nd: int = 2) -> str:
            return "—" if x is None else f"{x:.{nd}f}"

        print(
            f"| {r['set']} | {r['ranks']} | {r['json_mb']} | {f(p['median_s'])} "
            f"({f(p['min_s'])}–{f(p['max_s'])}) | {f(s['median_s'])} ({f(s['min_s'])}–"
            f"{f(s['max_s'])}) | {f(r['speedup'])} | {f(r['machine_scaling'])}× | "
            f"{f(p['median_s'] / r['ranks'] if p['median_s'] else None, 3)} | "
            f"{p['peak_mb']:.0f} | {s['peak_mb']:.0f} | {f(r['summary_only_s'])} | "
            f"{r['summaries_kb']} | {f(m['median_s'])} | {m['peak_mb']:.0f} | "
            + (f"{f(b['median_s'])}, {b['peak_mb']:.0f} |" if (b := r["before"]) else "— |")
        )
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
