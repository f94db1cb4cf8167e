"""``--nproc-per-node N``: launch through PyTorch's own elastic launcher (torchrun).

torchrun starts N copies of ``python -m gpuopt.runner.rank_entry``, each of which profiles the
user's script as one rank into ``DIR/rank-<RANK>/profile.json`` (torchrun sets RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR/PORT as usual, so the script's ``init_process_group`` works unchanged).
When all ranks end, this process merges them into ``DIR/profile.json``
(:func:`gpuopt.assemble.rank_merge.merge_ranks`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpuopt.assemble.rank_merge import merge_ranks
from gpuopt.errors import GpuoptError
from gpuopt.model.document import load_profile
from gpuopt.model.profile import Profile
from gpuopt.runner.finish import write_and_show
from gpuopt.runner.options import ProfileOptions
from gpuopt.runner.run_dir import PROFILE_NAME, RunDirectory, default_out_dir
from gpuopt.runner.target import Target


def torchrun_command(opts: ProfileOptions, target: Target, out: Path) -> list[str]:
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


def launch(opts: ProfileOptions, target: Target) -> int:
    run_dir = RunDirectory.prepare(opts.out or default_out_dir(target.stem), force=opts.force)
    run_dir.claim(target.display, list(target.args))
    env = dict(os.environ)
    # torchrun's own default, stated so its warning is not printed
    env.setdefault("OMP_NUM_THREADS", "1")
    try:
        proc = subprocess.run(torchrun_command(opts, target, run_dir.path), env=env)
    except KeyboardInterrupt:
        proc = subprocess.CompletedProcess([], 130)
    code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    profile = merge_ranks(_rank_profiles(run_dir.path), code, target.display, list(target.args))
    return write_and_show(profile, run_dir, opts, note=f" ({len(profile.ranks or [])} ranks)")


def _rank_profiles(out: Path) -> list[tuple[str, Profile]]:
    """Each rank's run directory (relative to ``out``) and its profile, in rank order; a rank
    whose profile cannot be read is left out with a one-line note on stderr."""
    rank_dirs = sorted(
        (p for p in out.glob("rank-*") if (p / PROFILE_NAME).exists()),
        key=lambda p: int(p.name.split("-")[1]),
    )
    found: list[tuple[str, Profile]] = []
    for d in rank_dirs:
        try:
            found.append((str(d.relative_to(out)), load_profile(d)))
        except GpuoptError as exc:
            print(f"gpuopt: {exc}", file=sys.stderr)
    return found
