"""gpu-check: what `gpuopt profile` costs on a short GPU step, and what its profiler window saw.

    python3 benchmarks/gpu/check_profile.py [--budget 100] [--parts]

* **Overhead**: ``benchmarks/workloads/dispatch_step.py --device cuda`` (120 steps of 268 ops,
  ~3-4 ms on an H200: the step the first GPU run measured at 1.11-1.34x), plain ``python3`` vs
  ``python3 -m gpuopt profile --quiet``, in alternated pairs (at least 10, more while the budget
  allows: short runs, so that many pairs fit), each run's own median step (the script's clock,
  after 10 warm-up steps). Said as the ratio of the medians (gpuopt's over plain's) with its 90%
  bootstrap interval over the pairs, against the target (≤ 1.03× per step at a short step).
* **Where it goes** (``--parts``): a third side in the rotation, ``gpuopt profile --quiet
  --measure-only`` (the step clock alone: no recorder or profiler window, no sampler, no memory
  probe), so that the full profile's cost splits into what every timed run pays and what the
  windows, the NVML sampler and the memory probe add. The H200 read 1.06-1.48x (3 pairs) for the
  full profile, against ~1.01x on a CPU: this says which part is GPU-only. Each round then takes
  three runs: give it ~150 s.
* **Which part** (``--split``, after the H200 read 1.46x for the full profile and 1.02x for
  ``--measure-only``): three more sides, the full profile with ``--window 0`` (no recorder, no
  profiler window), without the memory probe, and with the sampler's NVML reads off
  (``_profile_without.py``): give it ~180 s.
* **CUPTI left attached**: one more pair, the gpuopt side with ``TEARDOWN_CUPTI=0`` (Kineto's
  behaviour before gpuopt asked for teardown), when the budget allows.
* **The profiler window**: the trace the last gpuopt run wrote, read by gpuopt: its steps (the
  host's ``ProfilerStep`` annotations) and how many "Top call sites behind GPU idle time" rows
  name a user line; and any stderr line of that run that is not gpuopt's own.

In a dry run (``GPUOPT_GPU_CHECK_DRY_RUN=1``, no GPU) the same on the CPU, 40 steps, one pair.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import ROOT, Budget, child_env, device_or_skip, dry_run, gpuopt_cmd, say
from _common import run as run_cmd

WORKLOAD = ROOT / "benchmarks" / "workloads" / "dispatch_step.py"
# the longest one run may take before it is cut (an H200 run takes ~5 s; a dry run on a loaded
# 2-core machine up to ~20 s, torch's import most of it)
RUN_S = 40.0 if dry_run() else 20.0
TARGET = 1.03  # gpuopt profile's overhead on a short step: its ratio of medians at most this
STEPS = 120  # a run's steps: its median over 110 settled steps, and many pairs in the budget


def timed_run(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> Any:
    """The finished run, or None when it was cut at ``timeout`` (said so)."""
    try:
        return run_cmd(cmd, timeout, env)
    except subprocess.TimeoutExpired:
        say(f"- a run was cut after {timeout:.0f} s: {' '.join(cmd[1:3])}")
        return None


def own_step(proc: Any) -> float | None:
    if proc is None:
        return None
    m = re.search(r"^STEP_MEDIAN_MS ([0-9.]+)$", proc.stderr, re.M)
    return float(m.group(1)) if m and proc.returncode == 0 else None


class Sides:
    def __init__(self, device: str, steps: int, out: Path) -> None:
        self.args = [str(WORKLOAD), "--device", device, "--steps", str(steps)]
        self.out = out
        self.last: Any = None  # the last gpuopt run
        self.pair_s = 30.0 if dry_run() else 8.0  # what a pair takes: guessed, then measured

    def plain(self, budget: Budget) -> float | None:
        return own_step(timed_run([sys.executable, *self.args], min(RUN_S, budget.left())))

    def gpuopt(self, budget: Budget, **env: str) -> float | None:
        cmd = gpuopt_cmd("profile", "--quiet", "--force", "-o", str(self.out), *self.args)
        self.last = timed_run(cmd, min(RUN_S, budget.left()), child_env(**env))
        return own_step(self.last)

    def measure(self, budget: Budget) -> float | None:
        """``profile --measure-only``: the step clock alone (what optimize's timed runs use)."""
        out = str(self.out) + "-measure"
        cmd = gpuopt_cmd("profile", "--quiet", "--force", "--measure-only", "-o", out, *self.args)
        return own_step(timed_run(cmd, min(RUN_S, budget.left()), child_env()))

    def _full_but(self, budget: Budget, *extra: str, off: str = "") -> float | None:
        out = str(self.out) + "-split"
        args = ("profile", "--quiet", "--force", *extra, "-o", out, *self.args)
        cmd = [sys.executable, str(WITHOUT), off, *args] if off else gpuopt_cmd(*args)
        return own_step(timed_run(cmd, min(RUN_S, budget.left()), child_env()))

    def window0(self, budget: Budget) -> float | None:
        """``--window 0``: no recorder, no profiler window (CUPTI never attached)."""
        return self._full_but(budget, "--window", "0")

    def nomem(self, budget: Budget) -> float | None:
        """The full profile without the memory probe."""
        return self._full_but(budget, off="memory")

    def nonvml(self, budget: Budget) -> float | None:
        """The full profile, its sampler without NVML."""
        return self._full_but(budget, off="nvml")


WITHOUT = Path(__file__).with_name("_profile_without.py")
LABELS = {
    "gpuopt": "gpuopt",
    "measure": "--measure-only",
    "window0": "--window 0",
    "nomem": "no memory probe",
    "nonvml": "no NVML reads",
}


def overhead(
    sides: Sides, budget: Budget, pairs_min: int, pairs_max: int, parts: bool, split: bool = False
) -> None:
    """At least ``pairs_min`` rounds (a plain run and each gpuopt side, the order rotated); more,
    up to ``pairs_max``, while a round still fits with the CUPTI pair after it."""
    names = ["plain", "gpuopt"]
    if parts or split:
        names[1:1] = ["measure"]
    if split:
        names[2:2] = ["window0", "nomem", "nonvml"]
    ratios: dict[str, list[float]] = {n: [] for n in names[1:]}
    plain_ms: list[float] = []
    for i in range(pairs_max):
        need = sides.pair_s if i < pairs_min else 2 * sides.pair_s + 10
        if budget.left() < need:
            if i < pairs_min:
                say(f"- profile overhead: budget spent after {i} round(s)")
            break
        t0 = time.perf_counter()
        order = names[i % len(names) :] + names[: i % len(names)]
        got = {k: getattr(sides, k)(budget) for k in order}
        sides.pair_s = time.perf_counter() - t0
        a = got["plain"]
        if a is None or any(got[k] is None for k in ratios):
            err = (sides.last.stderr.strip().splitlines() or ["?"])[-1] if sides.last else "?"
            say(f"- profile overhead pair {i + 1}: a run failed ({err[:200]})")
            continue
        plain_ms.append(a)
        shown = []
        for k in ratios:
            b = got[k]
            assert b is not None
            ratios[k].append(b / a)
            shown.append(f"{LABELS[k]} {b:.3f} ms ({b / a:.3f}×)")
        say(f"- profile overhead pair {i + 1}: plain {a:.3f} ms, " + ", ".join(shown))
    for k, rs in ratios.items():
        if rs:
            side = [a * r for a, r in zip(plain_ms, rs, strict=True)]
            ratio = statistics.median(side) / statistics.median(plain_ms)
            lo, hi = ratio_interval(plain_ms, side)
            met = "met" if ratio <= TARGET else f"not met by {(ratio - TARGET) * 100:.1f} points"
            say(
                f"- **profile overhead{'' if k == 'gpuopt' else ', ' + LABELS[k]}** "
                f"(dispatch_step.py, 268 ops a step, own median step, {len(rs)} alternated "
                f"{'rounds' if len(names) > 2 else 'pairs'}): ratio of medians "
                f"**{ratio:.3f}×** (90% interval {lo:.3f}–{hi:.3f}; target ≤ {TARGET:.2f}×: "
                f"{met}), pair ratios [{min(rs):.3f}–{max(rs):.3f}], plain median step "
                f"{statistics.median(plain_ms):.3f} ms"
            )


def ratio_interval(
    plain: list[float], side: list[float], level: float = 0.90, draws: int = 2000
) -> tuple[float, float]:
    """Percentile bootstrap interval of median(side) / median(plain), pairs resampled together
    (seeded: the same pairs give the same interval)."""
    import random

    rng = random.Random(0)
    n = len(plain)
    got = []
    for _ in range(draws):
        idx = [rng.randrange(n) for _ in range(n)]
        got.append(
            statistics.median(side[i] for i in idx) / statistics.median(plain[i] for i in idx)
        )
    got.sort()
    return got[int((1 - level) / 2 * draws)], got[min(draws - 1, int((1 + level) / 2 * draws))]


def cupti_attached(sides: Sides, budget: Budget) -> None:
    if budget.left() < sides.pair_s + 5:
        say("- CUPTI left attached (TEARDOWN_CUPTI=0): not measured (budget)")
        return
    a = sides.plain(budget)
    b = sides.gpuopt(budget, TEARDOWN_CUPTI="0")
    if a is not None and b is not None:
        say(
            f"- with CUPTI left attached after the window (TEARDOWN_CUPTI=0): plain {a:.3f} ms, "
            f"gpuopt {b:.3f} ms ({b / a:.3f}×)"
        )


def window(sides: Sides) -> None:
    """The last gpuopt run's window trace, as gpuopt reads it, and its stderr."""
    from gpuopt.assemble.trace_profile import profile_from_traces

    proc = sides.last
    if proc is None or proc.returncode != 0:
        say("- profiler window: no gpuopt run to read")
        return
    foreign = [
        ln
        for ln in proc.stderr.splitlines()
        if ln and not ln.startswith(("gpuopt", "STEP_", "LOOP_"))
    ]
    say(
        "- stderr of `gpuopt profile --quiet`, lines not gpuopt's or the script's: "
        + (f"{len(foreign)}: " + " | ".join(foreign[:3])[:300] if foreign else "none")
    )
    doc = json.loads((sides.out / "profile.json").read_text())
    info = (doc.get("trace") or {}).get("profiler_window") or {}
    trace = sides.out / str(info.get("file") or "profiler-window.pt.trace.json.gz")
    if not trace.exists():
        say(f"- profiler window: no trace ({info.get('note') or 'not written'})")
        return
    p = profile_from_traces(trace)
    steps = [f"{s.time_s * 1e3:.2f}" for s in (p.steps.series or [])]
    sites = next((t for t in p.tables if t.title.startswith("Top call sites")), None)
    rows = sites.rows if sites is not None else []
    col = sites.columns.index("site") if sites is not None and "site" in sites.columns else None
    named = [r for r in rows if col is not None and r[col] not in (None, "", "–")]
    example = f" (first: {named[0]})" if named else ""
    say(
        f"- profiler window trace: {len(steps)} steps measured from the host annotations, "
        f"{', '.join(steps) or '–'} ms (the run's median step "
        f"{doc['steps']['time_s']['median'] * 1e3:.3f} ms); idle-cause rows naming a user "
        f"line: {len(named)} of {len(rows)}{example}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--budget", type=float, default=100.0, help="seconds this check may take")
    ap.add_argument("--parts", action="store_true", help="a third side: profile --measure-only")
    ap.add_argument(
        "--split",
        action="store_true",
        help="--parts and three more sides: --window 0, no memory probe, no NVML reads",
    )
    a = ap.parse_args()
    budget = Budget(a.budget)
    device = device_or_skip()
    if device is None:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        sides = Sides(device, 40 if dry_run() else STEPS, Path(tmp) / "run")
        rounds = (1, 1) if dry_run() else (10, 30)
        overhead(sides, budget, *rounds, a.parts, a.split)
        window(sides)
        if device == "cuda":
            cupti_attached(sides, budget)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
