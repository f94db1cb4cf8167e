"""Does ``gpuopt optimize`` claim the gain the user gets?

    python benchmarks/bench_optimize.py [--pairs 5] [--time-budget S] [--only NAME] [--markdown F]
    python benchmarks/bench_optimize.py --cost     # optimize's own cost on 5 and 500 ms steps

Per workload: ``gpuopt optimize --fix NAME`` on a copy of the script (its claimed gain: the
candidate's steps/s over the baseline's, with its interval, how it stopped, its runs and cost),
next to the gain of the same change measured outside gpuopt, and both copies run in plain python
under their own clock — a step is one ``optimizer.step()``, timed by a post-hook registered with
torch and nothing else of gpuopt's, the median step after the first five — in alternated pairs
(before, after, before, after, ...). The outside gain is the median of the pairs' ratios. Target:
the claimed gain within ±15% of the outside gain on every workload.

"The same change" is:

* for a fix with a source form, its own diff from ``optimize.json``, applied to a second copy
  of the script with ``patch -p0``;
* for a run-time fix (``amp``: the model's forward under autocast after the first step, fp16's
  GradScaler patches), the ``fixes.json`` of optimize's own candidate run
  (``out/runs/candidate-1/fixes/``), patched in by
  :func:`gpuopt.fixes.runtime.apply_fixes` — the function ``gpuopt run --fixes DIR`` and
  optimize's candidate runs call — before the script starts, as ``gpuopt run --fixes`` does
  (``out_dir=None``: no transform check written). Nothing else of gpuopt's is imported or
  installed on that side: no step clock, no loss record, no probe, no seeding; the only gpuopt
  code in its measured steps is the fix itself (the autocast wrapper around the forward, the
  loss scaling in ``backward`` and the optimizer's ``step``). The model finder's module hook
  that locates the model is removed at the first step, which the clock leaves out;
* where the workload also carries the change by hand behind a flag (``conv_adam.py --amp
  fp16``), that is timed too, in the same alternation, as an extra column ("by hand"): it is
  not the same code (its own GradScaler, no float32 cast of every output), so it is shown, not
  compared against the target.

Every run has one intra-op thread (``OMP_NUM_THREADS=1``, the host side of a GPU job): on a
shared 2-core machine, two OpenMP threads make steps bimodal (0.5 ms, or 200 ms when a thread
waits for a core). The load average is printed before and after each workload; the numbers of
one run are only comparable among themselves.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
SKIP = 5  # the outside clock leaves out the first steps (start-up, first allocations)
TARGET = 0.15
_CLOCK = (  # the script's own run in plain python; only the step clock (and a run-time fix) added
    "import runpy, sys, time\n"
    "import torch\n"
    "from torch.optim.optimizer import register_optimizer_step_post_hook\n"
    "ends = []\n"
    "register_optimizer_step_post_hook(lambda o, a, k: ends.append(time.perf_counter()))\n"
    "path, skip, fixes, *args = sys.argv[1:]\n"
    "if fixes != '-':\n"
    "    from pathlib import Path\n"
    "    from gpuopt.fixes.runtime import apply_fixes, load_fixes\n"
    "    apply_fixes(load_fixes(Path(fixes)), [Path(path).resolve().parent], out_dir=None)\n"
    "sys.argv = [path, *args]\n"
    "try:\n"
    "    runpy.run_path(path, run_name='__main__')\n"
    "finally:\n"
    "    steps = sorted(b - a for a, b in zip(ends[int(skip):], ends[int(skip) + 1:]))\n"
    "    print(f'OUTSIDE_MEDIAN_S {steps[len(steps) // 2]:.7f} {len(steps)}', file=sys.stderr)\n"
)


@dataclass
class Workload:
    name: str
    script: str  # relative to the repository
    fix: str
    args: list[str] = field(default_factory=list)
    optimize: list[str] = field(default_factory=list)  # more options of gpuopt optimize
    runtime: bool = False  # the change is the fix's run-time form (its fixes.json), not a diff
    by_hand: list[str] | None = None  # the workload's own flag for the change written by hand


WORKLOADS = [
    Workload("vectorize: four indexing loops", "examples/index_loops.py", "vectorize"),
    Workload(
        "padding: a per-sample loop", "examples/ragged_steps.py", "padding", ["--samples", "256"]
    ),
    Workload("dataloader: 2 ms a sample", "examples/io_loader.py", "dataloader"),
    Workload("syncs: .item() twice a step", "examples/sync_metrics.py", "syncs"),
    Workload(
        "amp fp16 on a CPU: slower",
        "benchmarks/workloads/conv_adam.py",
        "amp",
        optimize=["--amp-dtype", "fp16"],
        runtime=True,
        by_hand=["--amp", "fp16"],
    ),
]


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def run_optimize(w: Workload, work: Path, budget: float | None) -> tuple[dict[str, Any], float]:
    extra = ["--time-budget", str(budget)] if budget is not None else []
    cmd = [sys.executable, "-m", "gpuopt", "optimize", "--quiet", "--no-diff", "-o", "out"]
    cmd += ["--fix", w.fix, *w.optimize, *extra, Path(w.script).name, *w.args]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=work, env=ENV, capture_output=True, text=True)
    cost = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"gpuopt optimize failed on {w.name}: {r.stderr[-2000:]}")
    return json.loads((work / "out" / "optimize.json").read_text()), cost


def outside_median(script: Path, args: list[str], fixes: Path | None = None) -> float:
    r = subprocess.run(
        [sys.executable, "-c", _CLOCK, str(script), str(SKIP), str(fixes or "-"), *args],
        cwd=script.parent,
        env=ENV,
        capture_output=True,
        text=True,
    )
    if "OUTSIDE_MEDIAN_S" not in r.stderr:
        raise SystemExit(f"{script} failed outside gpuopt: {r.stderr[-2000:]}")
    return float(r.stderr.rsplit("OUTSIDE_MEDIAN_S", 1)[1].split()[0])


def runtime_fixes(work: Path, fix: str, into: Path) -> Path | str:
    """The fixes.json optimize's first candidate run carried, for a run-time fix (a copy in
    ``into``); a reason when there is none or it carries more than run-time forms."""
    src = work / "out" / "runs" / "candidate-1" / "fixes" / "fixes.json"
    if not src.is_file():
        return f"no candidate run's fixes.json for {fix} ({src})"
    doc = json.loads(src.read_text())
    if doc.get("sources"):
        return f"{fix}'s candidate carried rewritten sources, not only run-time forms"
    if doc.get("fixes") != [fix]:
        return f"candidate 1 carried {doc.get('fixes')}, not {fix} alone"
    into.mkdir()
    shutil.copy(src, into / "fixes.json")
    return into / "fixes.json"


def outside(w: Workload, tmp: Path, doc: dict[str, Any], pairs: int) -> dict[str, Any]:
    """The same change, timed outside gpuopt in alternated pairs (and, where the workload has
    one, its flag for the change by hand, in the same alternation)."""
    name = Path(w.script).name
    before, after = tmp / "before", tmp / "after"
    for d in (before, after):
        d.mkdir()
        shutil.copy(ROOT / w.script, d / name)
    fixes: Path | None = None
    if w.runtime:
        found = runtime_fixes(tmp / "optimize", w.fix, tmp / "fixes")
        if isinstance(found, str):
            return {"error": found}
        fixes = found
    else:
        (fix,) = [f for f in doc["fixes"] if f["id"] == w.fix]
        if not fix["diff"]:
            return {"error": f"no diff for {w.fix}: {fix['reason'][:200]}"}
        subprocess.run(["patch", "-s", "-p0"], input=fix["diff"], text=True, cwd=after, check=True)
    b, a, h = [], [], []
    for _ in range(pairs):
        b.append(outside_median(before / name, w.args))
        a.append(outside_median(after / name, w.args, fixes))
        if w.by_hand is not None:
            h.append(outside_median(before / name, [*w.args, *w.by_hand]))
    ratios = sorted(x / y for x, y in zip(b, a, strict=True))
    out: dict[str, Any] = {
        "change": "fixes.json (run-time form)" if w.runtime else "diff (patch -p0)",
        "before_ms": [round(x * 1e3, 3) for x in b],
        "after_ms": [round(x * 1e3, 3) for x in a],
        "ratios": [round(r, 3) for r in ratios],
        "speedup": round(statistics.median(ratios), 3),
    }
    if h:
        by_hand = sorted(x / y for x, y in zip(b, h, strict=True))
        out["by_hand"] = {
            "args": w.by_hand,
            "after_ms": [round(x * 1e3, 3) for x in h],
            "ratios": [round(r, 3) for r in by_hand],
            "speedup": round(statistics.median(by_hand), 3),
        }
    return out


def claimed(doc: dict[str, Any], name: str) -> dict[str, Any]:
    g = doc.get("gain") or {}
    fix = next((f for f in doc["fixes"] if f["id"] == name), {})
    return {
        "speedup": g.get("speedup"),
        "interval": [g.get("low"), g.get("high")],
        "label": g.get("label"),
        "noise": g.get("noise"),
        "stopped": g.get("stopped"),
        "runs": g.get("runs"),
        "half_widths": [g.get("baseline_half_width"), g.get("candidate_half_width")],
        "verified": (doc.get("verification") or {}).get("verified"),
        "kept": [f["id"] for f in doc["fixes"] if f["applied"]],
        "reason": fix.get("reason", "")[:200],
    }


def bench(w: Workload, tmp: Path, pairs: int, budget: float | None) -> dict[str, Any]:
    work = tmp / "optimize"
    work.mkdir(parents=True)
    shutil.copy(ROOT / w.script, work / Path(w.script).name)
    load0 = loadavg()
    doc, cost = run_optimize(w, work, budget)
    out: dict[str, Any] = {"workload": w.name, "fix": w.fix, "load_before": load0}
    out["gpuopt"] = claimed(doc, w.fix)
    out["gpuopt"]["cost_s"] = round(cost, 1)
    out["gpuopt"]["n_runs"] = len(doc["runs"])
    out["outside"] = outside(w, tmp, doc, pairs)
    out["load_after"] = loadavg()
    c, o = out["gpuopt"]["speedup"], out["outside"].get("speedup")
    if c and o:
        out["agreement"] = round(c / o, 3)
        out["within_target"] = abs(c / o - 1) <= TARGET
    return out


def markdown(results: list[dict[str, Any]]) -> str:
    rows = [
        "| workload | gpuopt: claimed gain [90% interval], verdict | stopped (runs a side) | "
        "cost | outside: median of pair ratios (range) | claimed / outside | load |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        g, o = r["gpuopt"], r["outside"]
        lo, hi = g["interval"]
        interval = f" [{lo:.2f}–{hi:.2f}]" if lo is not None and hi is not None else ""
        sp = f"{g['speedup']:.2f}x" if g["speedup"] else "—"
        verdict = f"{sp}{interval}, {g['label']}; kept: {', '.join(g['kept']) or 'none'}"
        runs = g["runs"] or ["?", "?"]
        if "ratios" in o:
            ratios = o["ratios"]
            out_text = f"{o['speedup']:.2f}x ({ratios[0]:.2f}–{ratios[-1]:.2f}, {len(ratios)})"
        else:
            out_text = o.get("error", "—")
        if "by_hand" in o:
            hand = o["by_hand"]
            out_text += (
                f"; by hand (`{' '.join(hand['args'])}`, not compared): {hand['speedup']:.2f}x "
                f"({hand['ratios'][0]:.2f}–{hand['ratios'][-1]:.2f})"
            )
        agree = r.get("agreement")
        agree_text = f"{agree:.2f} {'✓' if r.get('within_target') else '✗'}" if agree else "—"
        rows.append(
            f"| {r['workload']} | {verdict} | {g['stopped']} ({runs[0]}/{runs[1]}) | "
            f"{g['n_runs']} runs, {g['cost_s']:.0f} s | {out_text} | {agree_text} | "
            f"{r['load_before']} → {r['load_after']} |"
        )
    return "\n".join(rows) + "\n"


def cost(step_ms: float, quick: bool, budget: float | None) -> dict[str, Any]:
    """What ``gpuopt optimize`` costs on a script of fixed-time steps (sleeping: its steps do
    not depend on the load, only the start-up of each run does)."""
    with tempfile.TemporaryDirectory() as t:
        work = Path(t)
        shutil.copy(ROOT / "benchmarks" / "workloads" / "sleep_steps.py", work)
        cmd = [sys.executable, "-m", "gpuopt", "optimize", "--quiet", "--no-diff", "-o", "out"]
        cmd += ["--quick"] if quick else []
        cmd += ["--time-budget", str(budget)] if budget is not None else []
        cmd += ["--fix", "zero-grad", "sleep_steps.py", "--step-ms", str(step_ms)]
        load0 = loadavg()
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=work, env=ENV, capture_output=True, text=True, check=True)
        wall = time.perf_counter() - t0
        doc = json.loads((work / "out" / "optimize.json").read_text())
    g = doc.get("gain") or {}
    walls = [r["wall_s"] for r in doc["runs"]]
    return {
        "step_ms": step_ms,
        "quick": quick,
        "budget": budget,
        "cost_s": round(wall, 1),
        "runs": len(doc["runs"]),
        "run_wall_s": [round(min(walls), 1), round(max(walls), 1)],
        "stopped": g.get("stopped"),
        "gain": g.get("label"),
        "half_widths": [g.get("baseline_half_width"), g.get("candidate_half_width")],
        "load": f"{load0} → {loadavg()}",
    }


def cost_markdown(rows: list[dict[str, Any]]) -> str:
    out = [
        "| script | options | runs | wall of one run | optimize in all | stopped | load |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        opts = ("--quick " if r["quick"] else "") + (
            f"--time-budget {r['budget']:g}" if r["budget"] is not None else ""
        )
        lo, hi = r["run_wall_s"]
        out.append(
            f"| {r['step_ms']:g} ms a step | {opts.strip() or 'defaults'} | {r['runs']} | "
            f"{lo:.1f}–{hi:.1f} s | **{r['cost_s']:.0f} s** | {r['stopped']} | {r['load']} |"
        )
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--time-budget", type=float, default=None, help="passed to gpuopt optimize")
    ap.add_argument("--only", action="append", default=[], help="a fix name (repeatable)")
    ap.add_argument("--markdown", type=Path)
    ap.add_argument(
        "--cost", action="store_true", help="only optimize's own cost on 5 and 500 ms steps"
    )
    a = ap.parse_args()
    if a.cost:
        rows = []
        for step_ms, quick in ((5.0, False), (5.0, True), (500.0, False), (500.0, True)):
            rows.append(cost(step_ms, quick, a.time_budget))
            print(json.dumps(rows[-1]), flush=True)
        print(cost_markdown(rows))
        return 0
    chosen = [w for w in WORKLOADS if not a.only or w.fix in a.only]
    results = []
    for w in chosen:
        with tempfile.TemporaryDirectory() as t:
            r = bench(w, Path(t), a.pairs, a.time_budget)
        results.append(r)
        print(json.dumps(r), flush=True)
    table = markdown(results)
    print(table)
    if a.markdown:
        a.markdown.write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
