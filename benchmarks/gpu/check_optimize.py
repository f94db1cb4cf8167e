"""`make gpu-check`, optimize's measure: on a CUDA GPU, the gain `gpuopt optimize --fix vectorize`
claims on a small segmentation step (benchmarks/gpu/seg_train.py, ~4 ms a step on an H200) next
to the same diff timed outside gpuopt by the script's own clock, in alternated pairs.

    python3 benchmarks/gpu/check_optimize.py [--budget SECONDS]   (default 60)

Prints Markdown lines as it goes (a cut run keeps what it printed); "skipped: no CUDA device"
and exit 0 without a GPU; exit 0 unless it crashed. optimize runs with ``--quick`` and a time
budget that leaves the outside pairs room within ``--budget``.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
SCRIPT = Path(__file__).resolve().parent / "seg_train.py"
STEPS = "60"


def say(line: str) -> None:
    print(line, flush=True)


def run(cmd: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=max(timeout, 1.0), check=False
    )


def own_clock(script: Path, timeout: float) -> tuple[float, str]:
    r = run([sys.executable, str(script), "--steps", STEPS], script.parent, timeout)
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("STEP_MS"))
    parts = line.split()
    return float(parts[1]), parts[3]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--budget", type=float, default=60.0)
    a = ap.parse_args()
    t0 = time.perf_counter()
    import torch

    if not torch.cuda.is_available():
        say("skipped: no CUDA device")
        return 0
    device = torch.cuda.get_device_name()
    say(f"### optimize's claimed gain against the script's own clock ({device})")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        work = tmp / "opt"
        work.mkdir()
        shutil.copy(SCRIPT, work / SCRIPT.name)
        opt_budget = max(a.budget - 25.0, 10.0)
        cmd = [sys.executable, "-m", "gpuopt", "optimize", "--quiet", "--no-diff", "--quick"]
        cmd += ["--time-budget", f"{opt_budget:.0f}", "--fix", "vectorize", "-o", "out"]
        cmd += [SCRIPT.name, "--steps", STEPS]
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        try:
            r = subprocess.run(
                cmd,
                cwd=work,
                capture_output=True,
                text=True,
                timeout=a.budget,
                env=dict(os.environ, PYTHONPATH=path),
            )
        except subprocess.TimeoutExpired:
            say(f"- optimize: not finished within the budget ({a.budget:.0f} s)")
            return 0
        if r.returncode != 0:
            say(f"- optimize: FAILED (exit {r.returncode}): {r.stderr.strip()[-300:]}")
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
        before, after = tmp / "before", tmp / "after"
        for d in (before, after):
            d.mkdir()
            shutil.copy(SCRIPT, d / SCRIPT.name)
        subprocess.run(["patch", "-s", "-p0"], input=fix["diff"], text=True, cwd=after, check=True)
        ratios, losses = [], set()
        per_run = None
        while len(ratios) < 3:
            left = a.budget - (time.perf_counter() - t0)
            if per_run is not None and left < 2.2 * per_run:
                break
            s0 = time.perf_counter()
            try:
                b_ms, b_loss = own_clock(before / SCRIPT.name, left)
                a_ms, a_loss = own_clock(after / SCRIPT.name, left)
            except subprocess.TimeoutExpired:
                say("- outside: a pair did not finish within the budget")
                break
            per_run = (time.perf_counter() - s0) / 2
            losses |= {b_loss, a_loss}
            ratios.append(b_ms / a_ms)
            say(f"- pair {len(ratios)}: {b_ms:.3f} ms → {a_ms:.3f} ms a step ({b_ms / a_ms:.2f}x)")
        if ratios and g.get("speedup"):
            out = statistics.median(ratios)
            agree = g["speedup"] / out
            say(
                f"- outside: **{out:.2f}x** (median of {len(ratios)} pairs); claimed / outside "
                f"**{agree:.2f}** ({'within' if abs(agree - 1) <= 0.15 else 'outside'} ±15%); "
                f"sums of losses {'identical' if len(losses) == 1 else sorted(losses)}"
            )
    say(f"- check took {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
