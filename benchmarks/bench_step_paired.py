"""What `gpuopt profile` adds to a training step, timed in one process, step against step.

Whole processes alternated (``bench_profile.py``) cannot see tens of microseconds a step: the
same script's median step differs by ±10% from one process to the next on this machine, plain
against plain. Here one ``gpuopt profile W`` process switches gpuopt's per-step work off every
other step (the step clock, whose hooks and listeners then return at once, and the DataLoader
wrapper's batch listeners) and times each step by the script's optimizer steps; the median of
the steps with it on less the median of those with it off is its cost, in the same process, a
few milliseconds apart. What stays on in both: the DataLoader wrapper's own timing of each
fetch (swapping the class's ``__next__`` every step would slow every step), the optimizer's
hook call that finds no clock, and the sampling threads (their CPU is ``overhead.threads_s``).
Beside it, the run's ``overhead.per_step_s`` (over the steps with it on): what gpuopt's
document says it cost a step, the DataLoader wrapper's own part included.

    python benchmarks/bench_step_paired.py [--runs 3] [--steps 1200] [--from 30] [--pin 1]
        [--gpuopt PATH] [--workload benchmarks/workloads/user_whole_run.py]

Run it under the quiet lock (it times).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# Run as the script under `gpuopt profile`: an optimizer post-step hook registered after
# gpuopt's times each step and sets the next step's mode (before its batch is fetched), from step
# FROM on; then the workload runs as __main__ with its own arguments.
WRAPPER = """import json, os, runpy, statistics, sys, time
from torch.optim.optimizer import register_optimizer_step_post_hook
import gpuopt.probes.dataloader as dl
import gpuopt.probes.steps as st
from gpuopt.probes import own_cost
FROM = int(os.environ["BENCH_PAIRED_FROM"])
clock, listeners = st.active_clock(), list(dl._BATCH_LISTENERS)
state = {"n": 0, "t": None, "on": True}
times = {True: [], False: []}
def _hook(opt, args, kwargs):
    t = time.perf_counter()
    if state["n"] > FROM:
        times[state["on"]].append(t - state["t"])
    state["n"] += 1
    if state["n"] >= FROM:
        on = state["n"] % 2 == 0
        st._ACTIVE = clock if on else None
        dl._BATCH_LISTENERS[:] = listeners if on else []
        if on:  # the off step's own part (its fetch's) is not the next step's
            own_cost.spent = 0.0
        state["on"] = on
    state["t"] = time.perf_counter()
register_optimizer_step_post_hook(_hook)
def _report():
    st._ACTIVE, dl._BATCH_LISTENERS[:] = clock, listeners
    out = {k: [statistics.median(v), statistics.mean(v), len(v)] for k, v in
           (("on", times[True]), ("off", times[False])) if v}
    print("PAIRED " + json.dumps(out), file=sys.stderr)
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    _report()
"""


def one_run(gpuopt: str, workload: Path, steps: int, start: int, pin: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        wrapper = Path(tmp) / "paired.py"
        wrapper.write_text(WRAPPER)
        cmd = [gpuopt, "profile", "--quiet", "-o", f"{tmp}/run", str(wrapper), str(workload)]
        cmd += ["--steps", str(steps)]
        if pin is not None:
            cmd = ["taskset", "-c", pin, *cmd]
        env = {**os.environ, "BENCH_PAIRED_FROM": str(start)}
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, check=True)
        (line,) = re.findall(r"^PAIRED (.*)$", p.stderr, re.M)
        got = json.loads(line)
        key = json.loads((Path(tmp) / "run" / "profile.json").read_text())["overhead"]
    return {
        "on_ms": got["on"][0] * 1e3,
        "off_ms": got["off"][0] * 1e3,
        "median_diff_us": (got["on"][0] - got["off"][0]) * 1e6,
        "mean_diff_us": (got["on"][1] - got["off"][1]) * 1e6,
        "pairs": min(got["on"][2], got["off"][2]),
        "key_per_step_us": key["per_step_s"] * 1e6,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--from", dest="start", type=int, default=30, help="after the window")
    ap.add_argument("--pin", metavar="CORE")
    ap.add_argument("--gpuopt", default=str(Path(sys.executable).parent / "gpuopt"))
    ap.add_argument("--workload", type=Path, default=HERE / "workloads" / "user_whole_run.py")
    a = ap.parse_args()
    rows = [one_run(a.gpuopt, a.workload, a.steps, a.start, a.pin) for _ in range(a.runs)]
    print("| run | steps on / off | median on | median off | on − off (median) | "
          "on − off (mean) | `overhead.per_step_s` |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for i, r in enumerate(rows, 1):
        print(
            f"| {i} | {r['pairs']} | {r['on_ms']:.3f} ms | {r['off_ms']:.3f} ms | "
            f"{r['median_diff_us']:.0f} µs | {r['mean_diff_us']:.0f} µs | "
            f"{r['key_per_step_us']:.0f} µs |"
        )
    med = statistics.median(r["median_diff_us"] for r in rows)
    key = statistics.median(r["key_per_step_us"] for r in rows)
    print(f"\nmedian over runs: on − off {med:.0f} µs a step; overhead.per_step_s {key:.0f} µs")


if __name__ == "__main__":
    main()
