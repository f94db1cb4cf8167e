"""One rank under torchrun: ``python -m gpuopt.runner.rank_entry --out DIR ... -- ARGS``.

Profiles the user's script as this rank (``RANK`` from torchrun's environment) into
``DIR/rank-<RANK>``, quietly; the launching ``gpuopt profile`` merges and reports.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpuopt-rank")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--window", type=int, default=3)
    ap.add_argument("--sample-interval", type=float, default=0.2)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--script", default=None)
    ap.add_argument("-m", dest="module", default=None)
    ap.add_argument("args", nargs=argparse.REMAINDER)
    ns = ap.parse_args(argv)
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    from gpuopt.runner.main import ProfileOptions, ProfileSession, prepare_out_dir
    from gpuopt.runner.script import Target

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
    )
    out = prepare_out_dir(ns.out / f"rank-{rank}")
    doc = ProfileSession(Target(ns.script, ns.module, args), out, opts, rank=rank).run()
    return int(doc["exit_code"])


if __name__ == "__main__":
    sys.exit(main())
