"""``--nproc-per-node N``: launch through PyTorch's own elastic launcher (torchrun).

torchrun starts N copies of ``python -m gpuopt.runner.rank_entry``, each of which profiles the
user's script as one rank into ``DIR/rank-<RANK>/profile.json`` (torchrun sets RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR/PORT as usual, so the script's ``init_process_group`` works unchanged).
When all ranks end, this process merges them into ``DIR/profile.json``: rank 0's document with
``ranks`` filled in (one row per rank) and the slowest rank's step time called out.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpuopt.errors import GpuoptError
from gpuopt.runner.script import Target
from gpuopt.schema import empty_profile, load_profile, write_profile


def torchrun_command(opts: Any, target: Target, out: Path) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={opts.nproc_per_node}",
        "-m",
        "gpuopt.runner.rank_entry",
        "--out",
        str(out),
        "--warmup",
        str(opts.warmup),
        "--window",
        str(opts.window),
        "--sample-interval",
        str(opts.sample_interval),
    ]
    if opts.steps is not None:
        cmd += ["--steps", str(opts.steps)]
    if target.module is not None:
        cmd += ["-m", target.module]
    else:
        cmd += ["--script", target.script or ""]
    return [*cmd, "--", *target.args]


def launch(opts: Any, target: Target) -> int:
    from gpuopt.runner.main import default_out_dir, prepare_out_dir

    out = prepare_out_dir(opts.out or default_out_dir(target.stem)).resolve()
    env = dict(os.environ)
    env.setdefault(
        "OMP_NUM_THREADS", "1"
    )  # torchrun's own default, stated so the warning is not printed
    try:
        proc = subprocess.run(torchrun_command(opts, target, out), env=env)
    except KeyboardInterrupt:
        proc = subprocess.CompletedProcess([], 130)
    doc = merge_ranks(out, proc.returncode, target)
    if not opts.quiet:
        from gpuopt.report import print_report

        print_report(doc, opts.fmt)
    print(
        f"gpuopt: profile written to {out / 'profile.json'} ({len(doc.get('ranks') or [])} ranks)",
        file=sys.stderr,
    )
    return int(doc["exit_code"])


def merge_ranks(out: Path, returncode: int, target: Target) -> dict[str, Any]:
    """One document for the whole job: rank 0's, plus a row per rank."""
    rank_dirs = sorted(
        (p for p in out.glob("rank-*") if (p / "profile.json").exists()),
        key=lambda p: int(p.name.split("-")[1]),
    )
    docs: list[dict[str, Any]] = []
    for d in rank_dirs:
        try:
            docs.append(load_profile(d))
        except GpuoptError as exc:
            print(f"gpuopt: {exc}", file=sys.stderr)
    if docs:
        doc = dict(docs[0])
    else:
        doc = empty_profile(target.display, list(target.args))
        doc["warnings"] = ["no rank wrote a profile: the launcher failed before any rank started"]
    code = returncode if returncode >= 0 else 128 - returncode
    statuses = [d["status"] for d in docs]
    doc["exit_code"] = code
    doc["status"] = (
        "interrupted"
        if "interrupted" in statuses or code == 130
        else ("error" if code != 0 or "error" in statuses else "ok")
    )
    doc["rank"] = None
    doc["ranks"] = [
        {
            "rank": d.get("rank", i),
            "dir": str(rank_dirs[i].relative_to(out)),
            "status": d["status"],
            "steps": d["steps"]["count"],
            "step_time_median_s": d["steps"]["time_s"]["median"],
            "breakdown": d["breakdown"],
            "collective_s_per_step": d.get("collective_s_per_step"),
        }
        for i, d in enumerate(docs)
    ]
    medians = [
        (r["step_time_median_s"], r["rank"]) for r in doc["ranks"] if r["step_time_median_s"]
    ]
    if len(medians) > 1:
        slow, fast = max(medians), min(medians)
        doc["rank_spread"] = {
            "slowest_rank": slow[1],
            "fastest_rank": fast[1],
            "ratio": slow[0] / fast[0],
        }
    write_profile(doc, out / "profile.json")
    return doc
