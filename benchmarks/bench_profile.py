"""`gpuopt profile`'s overhead on runs shaped like users' (docs/bench-profile.md).

    python benchmarks/bench_profile.py --workloads step2ms --pin 1 [--pairs 10] [--baseline-rev REV]
    python benchmarks/bench_profile.py --render   # only the doc, from every part measured so far
    python benchmarks/bench_profile.py --accuracy  # data-wait accuracy and commands' start-up

Four workloads of ``benchmarks/workloads/`` (targets from the project's overhead goals):

* ``step2ms``: ``user_loader_step.py``, a ~2 ms dispatch-bound step (a per-class mask loop, a
  DataLoader over a TensorDataset, ``loss.item()`` every step, one intra-op thread); the measure
  is the script's own median step (``STEP_MEDIAN_MS``); target ≤ 1.03×;
* ``whole5s``: ``user_whole_run.py``, a ~5 s whole run (a small conv net, 400 steps, a
  DataLoader over an in-memory Dataset); the measure is the process's wall time; ≤ 1.03×;
* ``lightning``: ``user_lightning.py``, a Lightning loop of 60 steps of 2-3 ms; the process's
  wall time (and the script's own median step beside it); ≤ 1.05×;
* ``long``: ``user_long_step.py``, a ≥ 50 ms step; the script's own median step; ≤ 1.01×.

Each side runs as a whole process: plain ``python W`` and ``gpuopt profile W`` (the default
run a user types, its terminal report included, written to a pipe), and with ``--baseline-rev``
gpuopt at another git revision, in alternated pairs (the order flips every pair). The ratio is
the ratio of the medians (gpuopt's over plain's) with a 90% bootstrap interval (pairs resampled).
``--pin CORE`` runs every side under ``taskset -c CORE``. Each call measures what it is given
and stores it in ``benchmarks/.work/bench_profile/`` (one file per workload and pinning), so a
long benchmark is split into calls of a few minutes; ``--render`` writes the doc from them.

gpuopt runs as a user has it: the console script of a wheel install (installed.py), and the
plain side runs that install's ``python``, so both start the same interpreter and packages.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from installed import USER_VENV, revision_venv, user_venv

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK = HERE / ".work" / "bench_profile"
W = HERE / "workloads"
PLANTED = ROOT / "tests" / "data" / "scripts" / "planted_stall.py"
# name: (script and arguments, what it is, the measure ("step" or "wall"), the target ratio)
WORKLOADS: dict[str, tuple[list[str], str, str, float]] = {
    "step2ms": (
        [str(W / "user_loader_step.py")],
        "~2 ms dispatch-bound step, DataLoader over a TensorDataset, `.item()` every step",
        "step",
        1.03,
    ),
    "whole5s": (
        [str(W / "user_whole_run.py")],
        "~5 s whole run: small conv net, 400 steps, DataLoader over an in-memory Dataset",
        "wall",
        1.03,
    ),
    "lightning": (
        [str(W / "user_lightning.py")],
        "Lightning autoencoder, 60 steps of 2-3 ms",
        "wall",
        1.05,
    ),
    "long": (
        [str(W / "user_long_step.py")],
        "≥ 50 ms step: a wider conv net, 30 steps",
        "step",
        1.01,
    ),
}


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def run_once(cmd: list[str]) -> dict[str, float]:
    """One whole process: its wall time, the script's own median step, gpuopt's own cost."""
    t0 = time.perf_counter()
    p = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    got = dict(re.findall(r"^(STEP_MEDIAN_MS) ([0-9.]+)$", p.stderr, re.M))
    out = {"wall_s": wall, "step_ms": float(got.get("STEP_MEDIAN_MS", "nan"))}
    return out


def own_cost(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "profile.json").read_text()).get("overhead")
    except (OSError, ValueError):
        return None


def bootstrap_ratio_ci(
    plain: list[float], other: list[float], level: float = 0.90, draws: int = 4000
) -> tuple[float, float]:
    """Percentile bootstrap interval of median(other) / median(plain), the pairs resampled
    together (seeded: the same pairs give the same interval)."""
    rng = random.Random(0)
    n = len(plain)
    ratios = []
    for _ in range(draws):
        idx = [rng.randrange(n) for _ in range(n)]
        ratios.append(
            statistics.median(other[i] for i in idx) / statistics.median(plain[i] for i in idx)
        )
    ratios.sort()
    return ratios[int((1 - level) / 2 * draws)], ratios[
        min(draws - 1, int((1 + level) / 2 * draws))
    ]


def measure(
    name: str, pairs: int, pin: str | None, bindir: Path, baseline: Path | None, save: Path
) -> dict:
    """``pairs`` alternated pairs; what is measured so far is written to ``save`` after each
    pair (a call cut at its time limit keeps its pairs)."""
    args, _, _, _ = WORKLOADS[name]
    with tempfile.TemporaryDirectory() as tmp:
        sides = {
            "plain": [str(bindir / "python"), *args],
            "gpuopt": [str(bindir / "gpuopt"), "profile", "--force", "-o", f"{tmp}/run", *args],
        }
        if baseline is not None:
            sides["baseline"] = [
                str(baseline / "gpuopt"), "profile", "--force", "-o", f"{tmp}/base", *args
            ]  # fmt: skip
        if pin is not None:
            sides = {k: ["taskset", "-c", pin, *cmd] for k, cmd in sides.items()}
        load_before = loadavg()
        for cmd in sides.values():  # warm the page cache
            run_once(cmd)
        runs: dict[str, list[dict[str, float]]] = {k: [] for k in sides}
        out = {
            "workload": name,
            "pairs": 0,
            "pin": pin,
            "date": str(dt.date.today()),
            "load_before": load_before,
            "load_after": loadavg(),
            "runs": runs,
            "own_costs": [],
        }
        for i in range(pairs):
            for k in list(sides) if i % 2 == 0 else list(sides)[::-1]:
                runs[k].append(run_once(sides[k]))
                if k == "gpuopt":
                    cost = own_cost(Path(tmp) / "run")
                    if cost:
                        out["own_costs"].append(cost)
            out["pairs"], out["load_after"] = i + 1, loadavg()
            save.write_text(json.dumps(out, indent=1))
    return out


def summary(r: dict, side: str, measure_key: str) -> dict:
    plain = [x[measure_key] for x in r["runs"]["plain"]]
    other = [x[measure_key] for x in r["runs"][side]]
    lo, hi = bootstrap_ratio_ci(plain, other)
    return {
        "plain": statistics.median(plain),
        "other": statistics.median(other),
        "ratio": statistics.median(other) / statistics.median(plain),
        "ci": (lo, hi),
        "pair_ratios": [b / a for a, b in zip(plain, other, strict=True)],
    }


def _fmt(key: str, v: float) -> str:
    return f"{v:.3f} ms" if key == "step_ms" else f"{v:.3f} s"


def section(name: str, parts: list[dict]) -> list[str]:
    args, what, metric, target = WORKLOADS[name]
    key = "step_ms" if metric == "step" else "wall_s"
    label = "the script's own median step" if metric == "step" else "the process's wall time"
    cmd = f"python benchmarks/bench_profile.py --workloads {name} [--pin 1]"
    lines = [
        f"### {name}: {what}",
        "",
        f"`benchmarks/workloads/{Path(args[0]).name}`; measure: {label}; target ≤ {target:.2f}×. "
        f"Command: `{cmd}` (each configuration its own call, under the quiet lock).",
        "",
        "| pinned | side | pairs | date | load avg before / after | plain median | "
        "side median | **ratio of medians** | 90% interval | met |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    extra: list[str] = []
    for r in parts:
        sides = [s for s in ("gpuopt", "baseline") if s in r["runs"]]
        for side in sides:
            s = summary(r, side, key)
            lo, hi = s["ci"]
            pin = f"core {r['pin']}" if r["pin"] is not None else "no"
            label_side = "this tree" if side == "gpuopt" else "before (baseline revision)"
            met = "yes" if s["ratio"] <= target else f"no (+{(s['ratio'] - target) * 100:.1f} pts)"
            lines.append(
                f"| {pin} | {label_side} | {r['pairs']} | {r['date']} | {r['load_before']} / "
                f"{r['load_after']} | {_fmt(key, s['plain'])} | {_fmt(key, s['other'])} | "
                f"**{s['ratio']:.3f}×** | {lo:.3f}–{hi:.3f} | {met} |"
            )
            extra.append(
                f"Pair ratios ({pin}, {label_side}): "
                + ", ".join(f"{x:.3f}" for x in s["pair_ratios"])
            )
        if name == "lightning" or metric == "wall":
            s = summary(r, "gpuopt", "step_ms")
            extra.append(
                f"The script's own median step ({'pinned' if r['pin'] else 'unpinned'}): plain "
                f"{s['plain']:.3f} ms, gpuopt {s['other']:.3f} ms ({s['ratio']:.3f}×)."
            )
        costs = r.get("own_costs") or []
        if costs:
            med = {k: statistics.median(c[k] for c in costs) for k in costs[0]}
            extra.append(
                f"gpuopt's own cost as its documents say (`overhead`, medians of {len(costs)} "
                f"runs, {'pinned' if r['pin'] else 'unpinned'}): start {med['start_s']:.3f} s, "
                f"{med['per_step_s'] * 1e6:.1f} µs a step over {med['steps']:.0f} steps, "
                f"sampling threads {med['threads_s']:.3f} s CPU, windows {med['windows_s']:.3f} s "
                f"({med['window_steps']:.0f} steps), end {med['end_s']:.3f} s; total "
                f"{med['total_s']:.3f} s = {med['share'] * 100:.1f}% of the run."
            )
    return [*lines, "", *(x for e in extra for x in (e, "")), ""]


def accuracy(runs: int, bindir: Path) -> dict:
    """``breakdown.data_wait`` against the planted-stall script's own measure of its blocked
    time in ``next(loader)``; and the start-up of commands that never import torch."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            truth_f, out = Path(tmp) / f"truth{i}.json", Path(tmp) / f"run{i}"
            subprocess.run(
                [str(bindir / "gpuopt"), "profile", "--quiet", "-o", str(out), str(PLANTED)]
                + [str(truth_f)],
                check=True,
                cwd=ROOT,
                capture_output=True,
            )
            truth = json.loads(truth_f.read_text())["data_wait"]
            got = json.loads((out / "profile.json").read_text())["breakdown"]["data_wait"]
            rows.append((truth, got))
        cmds = {
            "gpuopt --help": [str(bindir / "gpuopt"), "--help"],
            "gpuopt report RUN --format json": [
                str(bindir / "gpuopt"), "report", f"{tmp}/run0", "--format", "json"
            ],
            "gpuopt report RUN (text)": [str(bindir / "gpuopt"), "report", f"{tmp}/run0"],
        }  # fmt: skip
        start = {
            k: statistics.median(run_once(c)["wall_s"] for _ in range(5)) for k, c in cmds.items()
        }
    return {"date": str(dt.date.today()), "load": loadavg(), "rows": rows, "start": start}


def accuracy_lines(acc: dict) -> list[str]:
    rows = acc["rows"]
    worst = max(abs(g - t) for t, g in rows)
    lines = [
        "### Data-wait accuracy and start-up",
        "",
        "The planted-stall script (`tests/data/scripts/planted_stall.py`) measures its own "
        f"blocked time in `next(loader)`; {len(rows)} runs, {acc['date']}, load {acc['load']}. "
        "Command: `python benchmarks/bench_profile.py --accuracy`.",
        "",
        "| run | ground truth data_wait | gpuopt breakdown.data_wait | error |",
        "|---|---|---|---|",
    ]
    lines += [f"| {i} | {t:.4f} | {g:.4f} | {abs(g - t):.4f} |" for i, (t, g) in enumerate(rows)]
    lines += ["", f"Max absolute error: **{worst:.4f}** (target ±0.03).", ""]
    lines += [
        "Start-up (whole process, median of 5; target < 0.5 s, torch never imported):",
        "",
        "| command | seconds |",
        "|---|---|",
    ]
    lines += [f"| `{k}` | {v:.3f} |" for k, v in acc["start"].items()]
    return [*lines, ""]


def render(out: Path) -> None:
    parts: dict[str, list[dict]] = {}
    for f in sorted(WORK.glob("*-*.json")):
        r = json.loads(f.read_text())
        parts.setdefault(r["workload"], []).append(r)
    lines = [
        "## `gpuopt profile`: its overhead on runs shaped like users'",
        "",
        f"{platform.machine()}, {os.cpu_count()} vCPUs (this project's shared VM, where other "
        "work runs beside a benchmark: the load averages say how busy it was), Python "
        f"{platform.python_version()}, torch {__import__('torch').__version__} (CPU). Each side "
        "is a whole process: plain `python W` and `gpuopt profile W` (the default run, its "
        "terminal report included), alternated pair by pair (the order flips every pair); the "
        "ratio is gpuopt's median over plain's, its 90% interval a bootstrap over the pairs. "
        "Pinned: every side under `taskset -c 1`. `benchmarks/bench_profile.py` says how.",
        "",
    ]
    for name in WORKLOADS:
        if name in parts:
            lines += section(name, sorted(parts[name], key=lambda r: str(r["pin"])))
    acc = WORK / "accuracy.json"
    if acc.exists():
        lines += accuracy_lines(json.loads(acc.read_text()))
    out.write_text("\n".join(lines).rstrip("\n") + "\n")
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--workloads", default=",".join(WORKLOADS), help="comma-separated: " + ", ".join(WORKLOADS)
    )
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--pin", metavar="CORE", help="run every side under taskset -c CORE")
    ap.add_argument("--baseline-rev", help="also time gpuopt at this git revision, alternated")
    ap.add_argument(
        "--render", action="store_true", help="only write the doc from the parts measured so far"
    )
    ap.add_argument(
        "--accuracy",
        action="store_true",
        help="only the data-wait accuracy (planted-stall script) and the start-up of commands",
    )
    ap.add_argument(
        "--installed",
        action="store_true",
        help="use the user-like installs as they are (built by a call before, outside the lock)",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench-profile.md")
    a = ap.parse_args()
    names = [] if a.render or a.accuracy else [w for w in a.workloads.split(",") if w]
    unknown = set(names) - set(WORKLOADS)
    if unknown:
        raise SystemExit(f"unknown workloads: {sorted(unknown)}")
    if names:
        bindir = USER_VENV / "bin" if a.installed else user_venv()  # as a user has it
        baseline = None
        if a.baseline_rev:
            baseline = revision_venv(a.baseline_rev, reuse=a.installed)
        WORK.mkdir(parents=True, exist_ok=True)
        for name in names:
            tag = f"pin{a.pin}" if a.pin is not None else "unpinned"
            measure(name, a.pairs, a.pin, bindir, baseline, WORK / f"{name}-{tag}.json")
            print(f"{name} ({tag}): done", file=sys.stderr)
    if a.accuracy:
        bindir = USER_VENV / "bin" if a.installed else user_venv()
        WORK.mkdir(parents=True, exist_ok=True)
        (WORK / "accuracy.json").write_text(json.dumps(accuracy(5, bindir), indent=1))
    render(a.out)


if __name__ == "__main__":
    main()
