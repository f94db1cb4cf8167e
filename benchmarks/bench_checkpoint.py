"""What one checkpoint of the running profile costs, and the share of a run that makes.

    python benchmarks/bench_checkpoint.py [--repeat 30] [SCRIPT [ARGS...]]

While a script runs, the sampling thread writes the profile so far every CHECKPOINT_S seconds,
or less often when a write would cost more than CHECKPOINT_SHARE of the run
(docs/reliability.md): the run's record → assembly → rules → encode → atomic write. This runs the
workload once under a ProfileSession, then repeats exactly that work on the finished run's state
(the largest a checkpoint of this run sees) and reports its median wall and CPU time. Under the
GIL the thread's CPU time is taken from the training loop, so the overhead is about ``cpu /
interval``. The whole-process before/after comparison is farm-bench's
(docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gpuopt.model.outcome import Outcome
from gpuopt.runner.finish import finish_profile
from gpuopt.runner.options import ProfileOptions
from gpuopt.runner.run_dir import RunDirectory
from gpuopt.runner.session import CHECKPOINT_S, CHECKPOINT_SHARE, ChildExit, ProfileSession
from gpuopt.script.target import Target

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("script", nargs="?", default=str(HERE / "workloads" / "train_cpu.py"))
    ap.add_argument("args", nargs=argparse.REMAINDER)
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = RunDirectory.prepare(Path(tmp) / "run")
        opts = ProfileOptions(script=ns.script, module=None, args=ns.args, out=run_dir.path)
        opts.quiet = True
        session = ProfileSession(Target(ns.script, None, ns.args), run_dir, opts)
        t0 = time.perf_counter()
        record = session.run()
        wall = time.perf_counter() - t0
        if isinstance(record, ChildExit):
            raise SystemExit("the workload forked; nothing to measure")
        steps = len(record.step_ends)
        outcome = Outcome("interrupted", 137, None)
        walls, cpus = [], []
        for _ in range(ns.repeat):
            w0, c0 = time.perf_counter(), time.process_time()
            run_dir.write_profile(finish_profile(session.record(outcome, checkpoint=True)))
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
        size = run_dir.profile_path.stat().st_size
    wall_ms, cpu_ms = statistics.median(walls) * 1e3, statistics.median(cpus) * 1e3
    print(f"workload: {ns.script} {' '.join(ns.args)}  ({steps} steps, {wall:.2f} s under gpuopt)")
    print(f"one checkpoint: median {wall_ms:.1f} ms wall, {cpu_ms:.1f} ms CPU over {ns.repeat}")
    print(
        f"  (min {min(walls) * 1e3:.1f} ms, max {max(walls) * 1e3:.1f} ms; "
        f"profile.json {size / 1024:.0f} KiB)"
    )
    every = max(CHECKPOINT_S, wall_ms / 1e3 / CHECKPOINT_SHARE)
    print(
        f"one every {every:.3g} s at this size (at least {CHECKPOINT_S:g} s, at most "
        f"{CHECKPOINT_SHARE:.0%} of the run): about {cpu_ms / 1e3 / every:.2%} of the run"
    )


if __name__ == "__main__":
    sys.exit(main())
