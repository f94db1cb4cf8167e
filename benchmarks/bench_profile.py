"""Foundation numbers: overhead of `gpuopt profile` on the script's own step clock and on the
whole process, and data-wait accuracy.

    python benchmarks/bench_profile.py [--pairs 7] [--step-pairs 11] [--out docs/bench-profile.md]
    python benchmarks/bench_profile.py --steps-only [--step-pairs 11] [--baseline-rev REV]

Step overhead (issue 24; targets ≤ 1.03× at 2-5 ms steps, ≤ 1.01× at ≥ 50 ms steps): each
workload prints its own median step (``STEP_MEDIAN_MS``, after 10 warm-up steps, loader wait
included) and its main thread's median CPU time per step; plain ``python W`` and ``gpuopt
profile --quiet W`` run in alternated pairs (the order flips every pair) and the ratio reported
is the median of the per-pair ratios of those medians:

* ``dispatch``: ``workloads/dispatch_step.py``, 300 steps of 268 tiny-tensor ops (2-5 ms): what
  a short GPU step is on its host, one intra-op thread;
* ``long``: ``workloads/train_cpu.py --width 1536``, 120 steps of ≥ 50 ms.

With ``--baseline-rev REV`` a third side, gpuopt at git revision REV installed the same way, runs
in the same alternation, so a change is timed side by side with what it changed.

Overhead: wall time of `gpuopt profile workloads/train_cpu.py` over plain
`python workloads/train_cpu.py` (200 steps), both as whole processes, in alternating pairs (the
order flips every pair so drift hits both sides); the ratio reported is the median of the
per-pair ratios. Accuracy: the planted-stall script measures its own blocked time in
next(loader); gpuopt's `breakdown.data_wait` is compared with it, over several runs.

gpuopt runs as a user has it: the console script of a wheel install (installed.py), and the plain
side runs that install's ``python``, so both start the same interpreter with the same packages.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from installed import revision_venv, user_venv

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORKLOAD = HERE / "workloads" / "train_cpu.py"
DISPATCH = HERE / "workloads" / "dispatch_step.py"
# name: (script, its arguments, what it is, the target ratio)
STEP_WORKLOADS = {
    "dispatch": (DISPATCH, ["--steps", "300"], "300 steps of 268 tiny-tensor ops (2-5 ms)", 1.03),
    "long": (WORKLOAD, ["--steps", "120", "--width", "1536"], "120 MLP steps of ≥ 50 ms", 1.01),
}
PLANTED = ROOT / "tests" / "data" / "scripts" / "planted_stall.py"
BIN = Path(sys.executable).parent  # replaced by the user-like install's bin folder in main()
PIN: str | None = None  # --pin CORE


def gpuopt(*args: str) -> list[str]:
    return [str(BIN / "gpuopt"), *args]


def timed(cmd: list[str]) -> float:
    return timed_parts(cmd)[0]


def timed_parts(cmd: list[str]) -> tuple[float, float, tuple[float, float, float] | None]:
    """Wall and CPU seconds, and (before loop, loop, after loop) seconds where the script prints
    ``LOOP_START``/``LOOP_END`` wall-clock stamps (the workload does)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0, w0 = time.perf_counter(), time.time()
    p = subprocess.run(
        cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    wall, w1 = time.perf_counter() - t0, time.time()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    stamps = dict(re.findall(r"^(LOOP_START|LOOP_END) ([0-9.]+)$", p.stderr, re.MULTILINE))
    parts = None
    if len(stamps) == 2:
        start, end = float(stamps["LOOP_START"]), float(stamps["LOOP_END"])
        parts = (start - w0, end - start, w1 - end)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), parts


def overhead(pairs: int, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        plain_cmd = [str(BIN / "python"), str(WORKLOAD)]
        prof_cmd = gpuopt("profile", "-o", str(Path(tmp) / "run"), *extra, str(WORKLOAD))
        timed(plain_cmd)  # warm the page cache for both
        timed(prof_cmd)
        plain, prof, ratios, cpu_ratios, parts = [], [], [], [], []
        for i in range(pairs):
            if i % 2 == 0:
                a, ac, ap = timed_parts(plain_cmd)
                b, bc, bp = timed_parts(prof_cmd)
            else:
                b, bc, bp = timed_parts(prof_cmd)
                a, ac, ap = timed_parts(plain_cmd)
            plain.append(a)
            prof.append(b)
            ratios.append(b / a)
            cpu_ratios.append(bc / ac)
            if ap and bp:
                parts.append({"plain": ap, "gpuopt": bp})
        doc = json.loads((Path(tmp) / "run" / "profile.json").read_text())
    return {
        "pairs": pairs,
        "args": extra,
        "plain_s": plain,
        "gpuopt_s": prof,
        "ratios": ratios,
        "median_ratio": statistics.median(ratios),
        "cpu_ratios": cpu_ratios,
        "median_cpu_ratio": statistics.median(cpu_ratios),
        "ratio_ci90": bootstrap_median_ci(ratios),
        "parts": parts,
        **split_parts(parts),
        "steps_seen": doc["steps"]["count"],
        "median_step_ms": doc["steps"]["time_s"]["median"] * 1e3,
    }


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def own_step(cmd: list[str]) -> tuple[float, float]:
    """The script's own median step and its main thread's median CPU time per step (ms)."""
    p = subprocess.run(
        cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    got = dict(re.findall(r"^(STEP_MEDIAN_MS|STEP_CPU_MEDIAN_MS) ([0-9.]+)$", p.stderr, re.M))
    return float(got["STEP_MEDIAN_MS"]), float(got["STEP_CPU_MEDIAN_MS"])


def step_overhead(name: str, pairs: int, baseline: Path | None = None) -> dict:
    """Plain python vs `gpuopt profile --quiet` (and the baseline revision's), alternated, on the
    script's own median step."""
    script, args, _, _ = STEP_WORKLOADS[name]
    with tempfile.TemporaryDirectory() as tmp:
        sides = {
            "plain": [str(BIN / "python"), str(script), *args],
            "gpuopt": gpuopt(
                "profile", "--quiet", "--force", "-o", f"{tmp}/run", str(script), *args
            ),
        }
        if baseline is not None:
            sides["baseline"] = [
                str(baseline / "gpuopt"), "profile", "--quiet", "--force", "-o", f"{tmp}/base",
                str(script), *args,
            ]  # fmt: skip
        if PIN is not None:  # every side on one core: the VM's per-process speed swings stay out
            sides = {k: ["taskset", "-c", PIN, *cmd] for k, cmd in sides.items()}
        load_before = loadavg()
        for cmd in sides.values():  # warm the page cache
            own_step(cmd)
        wall: dict[str, list[float]] = {k: [] for k in sides}
        cpu: dict[str, list[float]] = {k: [] for k in sides}
        for i in range(pairs):
            order = list(sides) if i % 2 == 0 else list(sides)[::-1]
            for k in order:
                w, c = own_step(sides[k])
                wall[k].append(w)
                cpu[k].append(c)
        doc = json.loads((Path(tmp) / "run" / "profile.json").read_text())
    out: dict = {
        "workload": name,
        "pairs": pairs,
        "load_before": load_before,
        "load_after": loadavg(),
        "wall_ms": wall,
        "cpu_ms": cpu,
        "ops_per_step": (doc.get("dispatch") or {}).get("ops_per_step"),
    }
    for k in sides:
        if k == "plain":
            continue
        ratios = [b / a for a, b in zip(wall["plain"], wall[k], strict=True)]
        cpu_ratios = [b / a for a, b in zip(cpu["plain"], cpu[k], strict=True)]
        out[k] = {
            "ratios": ratios,
            "median_ratio": statistics.median(ratios),
            "ratio_ci90": bootstrap_median_ci(ratios),
            "cpu_ratios": cpu_ratios,
            "median_cpu_ratio": statistics.median(cpu_ratios),
            "extra_us_per_step": statistics.median(
                (b - a) * 1e3 for a, b in zip(wall["plain"], wall[k], strict=True)
            ),
            "extra_cpu_us_per_step": statistics.median(
                (b - a) * 1e3 for a, b in zip(cpu["plain"], cpu[k], strict=True)
            ),
        }
    return out


def step_lines(results: list[dict], cmd: str) -> list[str]:
    lines = [
        "### Step overhead: the script's own median step, plain python vs `gpuopt profile --quiet`",
        "",
        f"Command: `{cmd}` · {dt.date.today()} · {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, torch {__import__('torch').__version__} (CPU)",
        "",
        "| workload | sides | pairs | load avg before / after | plain median step | "
        "median of pair ratios (wall) | 90% interval | target | CPU-time ratio | "
        "extra per step (wall / CPU) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        _, _, what, target = STEP_WORKLOADS[r["workload"]]
        for side in ("gpuopt", "baseline"):
            if side not in r:
                continue
            x = r[side]
            lo, hi = x["ratio_ci90"]
            label = "this tree" if side == "gpuopt" else "baseline revision"
            lines.append(
                f"| {r['workload']}: {what} | {label} | {r['pairs']} | {r['load_before']} / "
                f"{r['load_after']} | {statistics.median(r['wall_ms']['plain']):.3f} ms | "
                f"**{x['median_ratio']:.3f}×** | {lo:.3f}–{hi:.3f} | ≤ {target:.2f}× | "
                f"{x['median_cpu_ratio']:.3f}× | {x['extra_us_per_step']:.0f} / "
                f"{x['extra_cpu_us_per_step']:.0f} µs |"
            )
    for r in results:
        for side in ("gpuopt", "baseline"):
            if side in r:
                lines += [
                    "",
                    f"Pair ratios ({r['workload']}, {side}, wall): "
                    + ", ".join(f"{x:.3f}" for x in r[side]["ratios"]),
                ]
    ops = next((r["ops_per_step"] for r in results if r["workload"] == "dispatch"), None)
    if ops:
        lines += ["", f"Ops per step of the dispatch workload (gpuopt's recorder): {ops}."]
    return lines


def bootstrap_median_ci(
    xs: list[float], level: float = 0.90, draws: int = 4000
) -> tuple[float, float]:
    """Percentile bootstrap interval of the median (seeded: the same pairs give the same
    interval)."""
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(draws))
    lo = meds[int((1 - level) / 2 * draws)]
    hi = meds[min(draws - 1, int((1 + level) / 2 * draws))]
    return lo, hi


def split_parts(parts: list[dict]) -> dict:
    """Per pair: gpuopt's extra seconds before and after the loop (fixed costs) and its loop-time
    ratio (per-step cost); medians over the pairs. Far less noisy than the whole-run ratio: the
    loop's own ±10% swings cancel out of the fixed parts, and the fixed parts out of the loop."""
    if not parts:
        return {}
    before = [p["gpuopt"][0] - p["plain"][0] for p in parts]
    after = [p["gpuopt"][2] - p["plain"][2] for p in parts]
    loop = [p["gpuopt"][1] / p["plain"][1] for p in parts]
    return {
        "extra_before_loop_s": statistics.median(before),
        "extra_after_loop_s": statistics.median(after),
        "loop_ratio": statistics.median(loop),
        "plain_loop_s": statistics.median(p["plain"][1] for p in parts),
        "plain_outside_loop_s": statistics.median(p["plain"][0] + p["plain"][2] for p in parts),
    }


def start_time(runs: int) -> dict:
    """Whole-process time of `gpuopt --help` and `gpuopt report RUN --format json` (no torch)."""
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        subprocess.run(
            gpuopt("profile", "--quiet", "--steps", "5", "-o", str(run), str(WORKLOAD)),
            check=True,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        cmds = {
            "gpuopt --help": gpuopt("--help"),
            "gpuopt report RUN --format json": gpuopt("report", str(run), "--format", "json"),
            "gpuopt report RUN (text)": gpuopt("report", str(run)),
        }
        return {
            name: statistics.median(timed(cmd) for _ in range(runs)) for name, cmd in cmds.items()
        }


def accuracy(runs: int) -> dict:
    errors = []
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            truth_f = Path(tmp) / f"truth{i}.json"
            out = Path(tmp) / f"run{i}"
            subprocess.run(
                gpuopt("profile", "--quiet", "-o", str(out), str(PLANTED), str(truth_f)),
                check=True,
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            truth = json.loads(truth_f.read_text())["data_wait"]
            got = json.loads((out / "profile.json").read_text())["breakdown"]["data_wait"]
            rows.append((truth, got))
            errors.append(abs(got - truth))
    return {"runs": runs, "rows": rows, "max_abs_error": max(errors)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--accuracy-runs", type=int, default=5)
    ap.add_argument("--without-recorder", action="store_true", help="also measure with --window 0")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "bench-profile.md")
    ap.add_argument("--step-pairs", type=int, default=11, help="pairs per step workload")
    ap.add_argument(
        "--steps-only", action="store_true", help="only the step overhead (the script's clock)"
    )
    ap.add_argument("--workloads", default="dispatch,long", help="step workloads to run")
    ap.add_argument("--baseline-rev", help="also time gpuopt at this git revision, alternated")
    ap.add_argument(
        "--pin",
        metavar="CORE",
        help="run every side on this core (taskset -c CORE): on a 2-vCPU VM a process's speed "
        "depends on where it runs, by up to 2x from one run to the next",
    )
    a = ap.parse_args()
    global BIN, PIN
    PIN = a.pin
    BIN = user_venv()  # a wheel install, as a user has it (see installed.py)
    cmd = "python benchmarks/bench_profile.py " + " ".join(sys.argv[1:])
    baseline = revision_venv(a.baseline_rev) if a.baseline_rev else None
    steps = [step_overhead(w, a.step_pairs, baseline) for w in a.workloads.split(",") if w]
    (HERE / ".work").mkdir(exist_ok=True)
    (HERE / ".work" / "bench_profile_steps.json").write_text(json.dumps(steps, indent=1))
    if a.steps_only:
        text = "\n".join(step_lines(steps, cmd.strip())) + "\n"
        a.out.write_text(text)
        print(text)
        return
    ov = overhead(a.pairs, [])
    ov_norec = overhead(a.pairs, ["--window", "0"]) if a.without_recorder else None
    acc = accuracy(a.accuracy_runs)
    st = start_time(5)
    lines = [
        "## `gpuopt profile`: overhead and data-wait accuracy",
        "",
        f"Command: `{cmd.strip()}` · {dt.date.today()} · {platform.machine()}, "
        f"{os.cpu_count()} cores, "
        f"Python {platform.python_version()}, torch {__import__('torch').__version__} (CPU)",
        "",
        f"Workload: `benchmarks/workloads/train_cpu.py`, {ov['steps_seen']} steps, median step "
        f"{ov['median_step_ms']:.1f} ms under gpuopt, torch with one intra-op thread "
        "(the host side of a GPU job; see the workload's docstring). "
        f"Whole-process wall time, {a.pairs} alternating pairs.",
        "",
        "| configuration | plain python median (s) | gpuopt median (s) "
        "| median of pair ratios (wall) | target | median of pair ratios (CPU time) |",
        "|---|---|---|---|---|---|",
    ]
    configs = [("default (recorder window on)", ov)] + (
        [("--window 0 (recorder off)", ov_norec)] if ov_norec else []
    )
    for name, r in configs:
        lines.append(
            f"| {name} | {statistics.median(r['plain_s']):.3f} "
            f"| {statistics.median(r['gpuopt_s']):.3f} | "
            f"**{r['median_ratio']:.3f}×** | ≤ 1.03× | {r['median_cpu_ratio']:.3f}× |"
        )
    lo, hi = ov["ratio_ci90"]
    lines += ["", f"90% bootstrap interval of the median pair ratio (default): {lo:.3f}–{hi:.3f}."]
    if ov.get("parts"):
        fixed = ov["extra_before_loop_s"] + ov["extra_after_loop_s"]
        model = (ov["plain_outside_loop_s"] + fixed + ov["plain_loop_s"] * ov["loop_ratio"]) / (
            ov["plain_outside_loop_s"] + ov["plain_loop_s"]
        )
        lines += [
            "",
            "Where the time goes (medians over the pairs; "
            "the workload stamps its loop's start and end):",
            "",
            "| part | plain python | gpuopt − plain |",
            "|---|---|---|",
            "| before the loop (interpreter, imports, set-up) + after it (exit) "
            f"| {ov['plain_outside_loop_s']:.3f} s | "
            f"+{ov['extra_before_loop_s']:.3f} s before, +{ov['extra_after_loop_s']:.3f} s after |",
            f"| the 200-step loop | {ov['plain_loop_s']:.3f} s | ×{ov['loop_ratio']:.3f} |",
            "",
            f"Whole run from these parts: **{model:.3f}×** "
            f"(fixed +{fixed:.3f} s, loop ×{ov['loop_ratio']:.3f}).",
        ]
    lines += [
        "",
        "Pair ratios (default, wall): " + ", ".join(f"{x:.3f}" for x in ov["ratios"]),
        "",
        "Pair ratios (default, CPU time of the process tree): "
        + ", ".join(f"{x:.3f}" for x in ov["cpu_ratios"]),
        "",
        "Accuracy: planted-stall script (`tests/data/scripts/planted_stall.py`) "
        "measuring its own blocked time in "
        f"`next(loader)`; {acc['runs']} runs.",
        "",
        "| run | ground truth data_wait | gpuopt breakdown.data_wait | error |",
        "|---|---|---|---|",
    ]
    for i, (t, g) in enumerate(acc["rows"]):
        lines.append(f"| {i} | {t:.4f} | {g:.4f} | {abs(g - t):.4f} |")
    lines += ["", f"Max absolute error: **{acc['max_abs_error']:.4f}** (target ±0.03).", ""]
    lines += [
        "Start-up (whole process, median of 5; target < 0.5 s, torch never imported):",
        "",
        "| command | seconds |",
        "|---|---|",
    ]
    lines += [f"| `{k}` | {v:.3f} |" for k, v in st.items()]
    lines.append("")
    lines += step_lines(steps, cmd.strip()) + [""]
    a.out.write_text("\n".join(lines))
    print("\n".join(lines))
    (HERE / ".work").mkdir(exist_ok=True)
    (HERE / ".work" / "bench_profile.json").write_text(
        json.dumps(
            {"overhead": ov, "overhead_no_recorder": ov_norec, "accuracy": acc, "start_time": st},
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
