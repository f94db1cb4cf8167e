"""The instructions a training step runs on the training thread, plain and under `gpuopt profile`.

A wall-clock ratio needs a quiet machine; an instruction count does not: valgrind's callgrind
counts the instructions each thread executes, whatever else runs beside it. This script runs a
workload twice under callgrind, as ``python W`` and as ``gpuopt profile W``, and counts the
training thread's instructions over the same steps on both sides (steps ``--from`` to
``--from + --steps``, after warm-up and after gpuopt's recorder window), so the difference is
what gpuopt's code adds to a step on that thread. What it cannot see: time that is not
instructions of that thread (another thread's share of a core, cache misses, waits).

    python benchmarks/bench_step_instructions.py [--workload benchmarks/workloads/user_whole_run.py]
        [--from 20] [--steps 40] [ARGS for the workload...]

Needs ``valgrind`` and ``gcc`` (a 3-line helper issues callgrind's start/stop requests from an
optimizer-step hook registered by a small wrapper around the workload, on both sides alike).
Each side takes minutes (callgrind runs code ~50-100 times slower); the two run at once.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VENV_BIN = Path(sys.executable).parent

HELPER_C = """#include <valgrind/callgrind.h>
void cg_on(void) {
    CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; CALLGRIND_TOGGLE_COLLECT;
}
void cg_off(void) {
    CALLGRIND_TOGGLE_COLLECT; CALLGRIND_DUMP_STATS; CALLGRIND_STOP_INSTRUMENTATION;
}
"""

# Counts optimizer steps with a global post-hook; turns collection on at step FROM and off at
# FROM + STEPS; then runs the workload as __main__ with its own arguments.
WRAPPER = """import ctypes, os, runpy, sys
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
_lib = ctypes.CDLL(os.environ["BENCH_CG_LIB"])
_first, _last = int(os.environ["BENCH_CG_FROM"]), int(os.environ["BENCH_CG_TO"])
_n = [0]
def _hook(opt, args, kwargs):
    _n[0] += 1
    if _n[0] == _first:
        _lib.cg_on()
    elif _n[0] == _last:
        _lib.cg_off()
register_optimizer_step_post_hook(_hook)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def program_totals(annotated: str) -> int:
    """The PROGRAM TOTALS line of ``callgrind_annotate``'s output, as an integer."""
    m = re.search(r"^\s*([\d,]+)(?:\s+\([^)]*\))?\s+PROGRAM TOTALS", annotated, re.M)
    if m is None:
        raise ValueError("no PROGRAM TOTALS line")
    return int(m.group(1).replace(",", ""))


def total_ir(out_file: Path) -> int:
    """The instructions a callgrind output file counted."""
    text = subprocess.run(
        ["callgrind_annotate", str(out_file)], capture_output=True, text=True, check=True
    ).stdout
    return program_totals(text)


def start(name: str, cmd: list[str], tmp: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start one side under callgrind (the two sides run at once: instructions do not mind)."""
    prefix = tmp / name
    vg = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--collect-atstart=no",
        "--separate-threads=yes",
        f"--callgrind-out-file={prefix}.%p",
    ]
    log = (tmp / f"{name}.log").open("wb")
    return subprocess.Popen(vg + cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def counted(name: str, proc: subprocess.Popen[bytes], tmp: Path) -> int:
    """The training (main) thread's instructions while collection was on."""
    if proc.wait() != 0:
        raise SystemExit(f"{name} failed: see {tmp / (name + '.log')}")
    dumps = sorted(tmp.glob(f"{name}.*.1-01"))  # thread 1, the first dump: the steps counted
    if not dumps:
        raise SystemExit(f"{name}: callgrind wrote no dump of the training thread")
    return total_ir(dumps[0])


def main() -> None:
    import os

    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default=str(HERE / "workloads" / "user_whole_run.py"))
    ap.add_argument("--from", dest="first", type=int, default=20)
    ap.add_argument("--steps", type=int, default=40)
    args, rest = ap.parse_known_args()
    workload_args = rest or ["--steps", str(args.first + args.steps + 10)]
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        (tmp / "cg.c").write_text(HELPER_C)
        lib = tmp / "libcg.so"
        subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(tmp / "cg.c")])
        wrapper = tmp / "step_window.py"
        wrapper.write_text(WRAPPER)
        env = dict(os.environ)
        env.update(
            BENCH_CG_LIB=str(lib),
            BENCH_CG_FROM=str(args.first),
            BENCH_CG_TO=str(args.first + args.steps),
        )
        py = str(VENV_BIN / "python")
        target = [str(wrapper), args.workload, *workload_args]
        run_dir = tmp / "run"
        gp = [py, str(VENV_BIN / "gpuopt"), "profile", "--quiet", "-o", str(run_dir), *target]
        procs = {
            "plain": start("plain", [py, *target], tmp, env),
            "gpuopt": start("gpuopt", gp, tmp, env),
        }
        plain = counted("plain", procs["plain"], tmp)
        profiled = counted("gpuopt", procs["gpuopt"], tmp)
    n = args.steps
    print(f"workload {Path(args.workload).name}, steps {args.first}..{args.first + n - 1}")
    print(f"plain:  {plain:,} instructions, {plain / n:,.0f} a step")
    print(f"gpuopt: {profiled:,} instructions, {profiled / n:,.0f} a step")
    print(
        f"gpuopt adds {(profiled - plain) / n:,.0f} instructions a step "
        f"({(profiled / plain - 1) * 100:+.2f}%)"
    )


if __name__ == "__main__":
    main()
