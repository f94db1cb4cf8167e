"""`make gpu-check`, optimize's measure: on a CUDA GPU, the gain `gpuopt optimize --fix vectorize`
claims on a small segmentation step (benchmarks/gpu/seg_train.py, ~4 ms a step on an H200) next
to the same diff timed outside gpuopt by the script's own clock, in alternated pairs.

    python3 benchmarks/gpu/check_optimize.py [--budget SECONDS]   (default 40)
    python3 benchmarks/gpu/check_optimize.py --rehearse            # the same on a CPU, tiny sizes

Prints Markdown lines as it goes (a cut run keeps what it printed); "skipped: no CUDA device"
and exit 0 without a GPU; exit 0 unless it crashed. Within ``--budget``: ``gpuopt optimize
--quick`` with a time budget that stops it adding pairs ``OUTSIDE_S + 7`` seconds before the end
(its fewest runs always run: the profile, the loop check, two baselines, one candidate — about
10 s each on the H200, start-up included), then the outside pairs, both copies of the script
run in ONE process (``runpy``, alternating which goes first), so that a pair costs its steps and
not two interpreters' and CUDA contexts' start-up.
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
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
SCRIPT = Path(__file__).resolve().parent / "seg_train.py"
STEPS = "40"
OUTSIDE_S = 8.0  # seconds kept for the outside pairs (one interpreter, one CUDA context)
MAX_PAIRS = 5
TARGET = 0.15
# both copies in one process, alternated; a PAIR line per pair: before's and after's STEP_MS and
# LOSS_SUM; no pair started that would end past the deadline (time.time())
_DRIVER = """
import contextlib, io, runpy, sys, time
before, after, deadline, pairs, *args = sys.argv[1:]
deadline, pairs = float(deadline), int(pairs)

def once(path):
    sys.argv = [path, *args]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        runpy.run_path(path, run_name="__main__")
    line = [ln for ln in buf.getvalue().splitlines() if ln.startswith("STEP_MS")][-1].split()
    return line[1], line[3]

for k in range(pairs):
    t = time.time()
    got = {p: once(p) for p in ((before, after) if k % 2 == 0 else (after, before))}
    print("PAIR", *got[before], *got[after], flush=True)
    if time.time() + (time.time() - t) > deadline:
        break
"""


def say(line: str) -> None:
    print(line, flush=True)


def left(t0: float, budget: float) -> float:
    return budget - (time.perf_counter() - t0)


def run_optimize(work: Path, script_args: list[str], budget: float, env: dict[str, str]) -> bool:
    """optimize --quick --fix vectorize on ``work``'s copy within ``budget`` seconds (pairs added
    only while they end 7 s before it); False when it did not finish."""
    opt_budget = max(budget - 7.0, 1.0)
    cmd = [sys.executable, "-m", "gpuopt", "optimize", "--quiet", "--no-diff", "--quick"]
    cmd += ["--time-budget", f"{opt_budget:.0f}", "--fix", "vectorize", "-o", "out"]
    cmd += [SCRIPT.name, *script_args]
    try:
        r = subprocess.run(
            cmd, cwd=work, capture_output=True, text=True, timeout=budget, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        say(f"- optimize: not finished within {budget:.0f} s (its fewest runs did not fit)")
        return False
    if r.returncode != 0:
        say(f"- optimize: FAILED (exit {r.returncode}): {r.stderr.strip()[-300:]}")
        return False
    return True


def outside_pairs(
    tmp: Path, diff: str, script_args: list[str], seconds: float, env: dict[str, str]
) -> list[tuple[float, float, str, str]]:
    """(before ms, after ms, before's loss sum, after's) per pair, timed by the script's own
    clock, both copies in one process."""
    before, after = tmp / "before", tmp / "after"
    for d in (before, after):
        d.mkdir()
        shutil.copy(SCRIPT, d / SCRIPT.name)
    subprocess.run(["patch", "-s", "-p0"], input=diff, text=True, cwd=after, check=True)
    deadline = time.time() + seconds - 1.0
    cmd = [sys.executable, "-c", _DRIVER, str(before / SCRIPT.name), str(after / SCRIPT.name)]
    cmd += [f"{deadline:.3f}", str(MAX_PAIRS), *script_args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out: list[tuple[float, float, str, str]] = []
    assert proc.stdout is not None
    stop = threading.Timer(seconds, proc.kill)  # a pair that hangs or overruns is cut
    stop.start()
    try:
        for line in proc.stdout:
            if not line.startswith("PAIR"):
                continue
            _, b_ms, b_loss, a_ms, a_loss = line.split()
            out.append((float(b_ms), float(a_ms), b_loss, a_loss))
            b, a = out[-1][:2]
            say(f"- pair {len(out)}: {b:.3f} ms → {a:.3f} ms a step ({b / a:.2f}x)")
    finally:
        stop.cancel()
        proc.kill()
        err = proc.communicate()[1]
    if not out:
        say(f"- outside: no pair finished within {seconds:.0f} s {err.strip()[-300:]}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--budget", type=float, default=40.0)
    ap.add_argument(
        "--rehearse", action="store_true", help="on the CPU, 32x32 images (the logic, no GPU)"
    )
    a = ap.parse_args()
    t0 = time.perf_counter()
    import torch

    if not a.rehearse and not torch.cuda.is_available():
        say("skipped: no CUDA device")
        return 0
    script_args = ["--steps", STEPS]
    device = "CPU rehearsal, 32x32 images"
    if a.rehearse:
        script_args += ["--device", "cpu", "--size", "32"]
    else:
        device = torch.cuda.get_device_name()
    say(f"### optimize's claimed gain against the script's own clock ({device})")
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        work = tmp / "opt"
        work.mkdir()
        shutil.copy(SCRIPT, work / SCRIPT.name)
        if not run_optimize(work, script_args, left(t0, a.budget) - OUTSIDE_S, env):
            return 0
        doc = json.loads((work / "out" / "optimize.json").read_text())
        g = doc.get("gain") or {}
        (fix,) = [f for f in doc["fixes"] if f["id"] == "vectorize"]
        say(
            f"- gpuopt optimize --quick --fix vectorize: {g.get('label')}, "
            f"{g.get('speedup')}x [{g.get('low')}–{g.get('high')}], noise {g.get('noise')}, "
            f"stopped: {g.get('stopped')}, runs {g.get('runs')}; kept: {fix['applied']}, "
            f"verified {fix['verified']}; {len(doc['runs'])} runs, {doc.get('cost_s')} s"
        )
        if not fix["diff"]:
            say(f"- no diff to time outside: {fix['reason'][:200]}")
            return 0
        pairs = outside_pairs(tmp, fix["diff"], script_args, left(t0, a.budget), env)
        if pairs and g.get("speedup"):
            out = statistics.median(b / a for b, a, _, _ in pairs)
            agree = g["speedup"] / out
            losses = sorted({x for _, _, bl, al in pairs for x in (bl, al)})
            say(
                f"- outside: **{out:.2f}x** (median of {len(pairs)} pairs); claimed / outside "
                f"**{agree:.2f}** ({'within' if abs(agree - 1) <= TARGET else 'outside'} ±15%); "
                f"sums of losses {'identical' if len(losses) == 1 else losses}"
            )
    say(f"- check took {time.perf_counter() - t0:.0f} s (budget {a.budget:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
