"""``gpuopt optimize`` against the issue's numbers (issue 15), and checked from outside gpuopt.

    python benchmarks/bench_optimize.py [--pairs 3] [--markdown FILE]

1. **DataLoader-bound, I/O-like** (``examples/io_loader.py``: each sample sleeps 2 ms):
   ``gpuopt optimize --apply`` → its own before/after steps/s, speedup and verification (target:
   at least 2x, ``exact``). Then, outside gpuopt, the fix as the user takes it home: the diff of
   ``gpuopt optimize`` (without ``--apply``) applied to a copy with ``patch -p0``, and both
   scripts timed in plain python (training only: ``runpy`` under a timer), interleaved pairs.
2. **DataLoader-bound, CPU-bound decoding** (``examples/slow_dataset.py``: each sample busy-waits
   1.5 ms): on 2 cores, workers cannot add compute; what the sweep finds is reported as measured.
3. **Per-step syncs** (``examples/sync_metrics.py``: ``.item()`` twice a step, printed every 10):
   the rewritten copy must print exactly the same, and its profile (``--window 20``, so that the
   recorder sees two print points) must show at most one read per 10 steps at each site.
4. The cost of each ``gpuopt optimize`` (runs, seconds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
_TIMER = (  # import torch before the clock starts: only the script's own work is timed
    "import runpy, sys, time\n"
    "import torch\n"
    "path, *args = sys.argv[1:]\n"
    "sys.argv = [path, *args]\n"
    "t = time.perf_counter()\n"
    "runpy.run_path(path, run_name='__main__')\n"
    "print(f'TRAIN_S {time.perf_counter() - t:.4f}', file=sys.stderr)\n"
)


def gpuopt(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [sys.executable, "-m", "gpuopt", *args], cwd=cwd, capture_output=True, text=True
    )
    if r.returncode != 0:
        raise SystemExit(f"gpuopt {' '.join(args)} failed ({r.returncode}): {r.stderr[-2000:]}")
    return r


def optimize(name: str, tmp: Path, *extra: str) -> tuple[dict[str, Any], str, float]:
    work = tmp / name.replace(".py", "")
    work.mkdir()
    (work / name).write_text((EXAMPLES / name).read_text())
    t0 = time.perf_counter()
    r = gpuopt("optimize", "--quiet", "-o", "out", *extra, name, cwd=work)
    cost = time.perf_counter() - t0
    return json.loads((work / "out" / "optimize.json").read_text()), r.stdout, cost


def train_s(script: Path, args: list[str]) -> float:
    r = subprocess.run(
        [sys.executable, "-c", _TIMER, str(script), *args],
        cwd=script.parent,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(r.stderr.rsplit("TRAIN_S", 1)[1].split()[0])


def outside(tmp: Path, name: str, diff: str, pairs: int) -> dict[str, Any]:
    """The diff applied to a copy with patch -p0; both copies timed in plain python."""
    d = tmp / f"outside-{name.replace('.py', '')}"
    d.mkdir()
    (d / name).write_text((EXAMPLES / name).read_text())
    fixed = d / "fixed"
    fixed.mkdir()
    (fixed / name).write_text((EXAMPLES / name).read_text())
    subprocess.run(["patch", "-s", "-p0"], input=diff, text=True, cwd=fixed, check=True)
    before, after = [], []
    for _ in range(pairs):
        before.append(train_s(d / name, []))
        after.append(train_s(fixed / name, []))
    ratios = [b / a for b, a in zip(before, after, strict=True)]
    return {
        "before_s": [round(x, 3) for x in before],
        "after_s": [round(x, 3) for x in after],
        "speedup": round(statistics.median(ratios), 2),
    }


def sync_counts(tmp: Path, diff: str) -> dict[str, Any]:
    d = tmp / "sync-check"
    d.mkdir()
    name = "sync_metrics.py"
    (d / name).write_text((EXAMPLES / name).read_text())
    fixed = d / "fixed"
    fixed.mkdir()
    (fixed / name).write_text((EXAMPLES / name).read_text())
    subprocess.run(["patch", "-s", "-p0"], input=diff, text=True, cwd=fixed, check=True)
    out: dict[str, Any] = {}
    for label, where in (("before", d), ("after", fixed)):
        r = gpuopt("profile", "--quiet", "--window", "20", "-o", "p", name, cwd=where)
        prof = json.loads((where / "p" / "profile.json").read_text())
        out[label] = {
            "syncs": {s["site"]: s["count_per_step"] for s in prof["syncs"]},
            "stdout": r.stdout,
        }
    out["same_output"] = out["before"]["stdout"] == out["after"]["stdout"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--markdown", type=Path)
    a = ap.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        doc, _, cost = optimize("io_loader.py", tmp, "--apply")
        results["io_apply"] = _summary(doc, cost)
        work = tmp / "io-diff"
        work.mkdir()
        (work / "io_loader.py").write_text((EXAMPLES / "io_loader.py").read_text())
        t0 = time.perf_counter()
        r = gpuopt("optimize", "--quiet", "--no-measure", "-o", "o", "io_loader.py", cwd=work)
        results["io_diff_cost_s"] = round(time.perf_counter() - t0, 1)
        results["io_outside"] = outside(tmp, "io_loader.py", r.stdout, a.pairs)
        doc, _, cost = optimize("slow_dataset.py", tmp, "--apply")
        results["cpu_apply"] = _summary(doc, cost)
        doc, diff, cost = optimize("sync_metrics.py", tmp)
        results["sync"] = _summary(doc, cost)
        results["sync_check"] = sync_counts(tmp, diff)
    print(json.dumps(results, indent=2))
    if a.markdown:
        a.markdown.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def _summary(doc: dict[str, Any], cost: float) -> dict[str, Any]:
    return {
        "speedup": doc["speedup"],
        "gain": doc["gain"],
        "verified": (doc.get("verification") or {}).get("verified"),
        "runs": [(r["label"], r["steps_per_s"]) for r in doc["runs"]],
        "fixes": [
            (f["id"], f["applied"], f["verified"], f["settings"], f["reason"][:160])
            for f in doc["fixes"]
        ],
        "cost_s": round(cost, 1),
        "n_runs": len(doc["runs"]),
    }


if __name__ == "__main__":
    raise SystemExit(main())
