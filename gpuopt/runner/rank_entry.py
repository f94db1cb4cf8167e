"""One rank under torchrun: ``python -m gpuopt.runner.rank_entry --out DIR ... -- ARGS``.

Profiles the user's script as this rank (``RANK`` from torchrun's environment) into
``DIR/rank-<RANK>``, quietly; the launching ``gpuopt profile`` merges and reports.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gpuopt.defaults import SAMPLE_INTERVAL_S, WARMUP_STEPS, WINDOW_STEPS


def main(argv: list[str] | None = None) -> int:
    from gpuopt import debug

    debug.isolate()
    debug.tag(f"rank {os.environ.get('RANK', '0')}")  # the ranks share torchrun's stderr
    debug.from_env()  # gpuopt --debug profile --nproc-per-node N: the launcher set it
    ap = argparse.ArgumentParser(prog="gpuopt-rank")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--warmup", type=int, default=WARMUP_STEPS)
    ap.add_argument("--window", type=int, default=WINDOW_STEPS)
    ap.add_argument("--sample-interval", type=float, default=SAMPLE_INTERVAL_S)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--fixes", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--record-losses", action="store_true")
    ap.add_argument("--memory-for", default=None)
    ap.add_argument("--script", default=None)
    ap.add_argument("-m", dest="module", default=None)
    ap.add_argument("args", nargs=argparse.REMAINDER)
    ns = ap.parse_args(argv)
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    from gpuopt.errors import GpuoptError
    from gpuopt.model.profile import Profile
    from gpuopt.runner.measure import measure
    from gpuopt.runner.options import ProfileOptions
    from gpuopt.runner.run_dir import RunDirectory
    from gpuopt.script.held_sigterm import held_sigterm
    from gpuopt.script.target import Target

    rank = int(os.environ.get("RANK", "0"))
    opts = ProfileOptions(
        script=ns.script,
        module=ns.module,
        args=args,
        out=ns.out,
        steps=ns.steps,
        warmup=ns.warmup,
        window=ns.window,
        sample_interval=ns.sample_interval,
        quiet=True,
        fixes=ns.fixes,
        seed=ns.seed,
        record_losses=ns.record_losses,
        memory_for=ns.memory_for,
    )
    # the launcher refused or cleared an earlier run's ranks already
    run_dir = RunDirectory.prepare(ns.out / f"rank-{rank}", force=True)
    # torchrun sends SIGTERM to every rank once one fails: it waits for this rank's profile
    with held_sigterm():
        profile = measure(Target(ns.script, ns.module, args), run_dir, opts, rank=rank)
        if isinstance(profile, Profile):
            try:
                run_dir.write_profile(profile)
            except GpuoptError as exc:
                print(f"gpuopt: error: rank {rank}: {exc}", file=sys.stderr)
                return 2
    # None only in a profile written before an exec, and then this process never gets here
    return profile.exit_code or 0


if __name__ == "__main__":
    sys.exit(main())
