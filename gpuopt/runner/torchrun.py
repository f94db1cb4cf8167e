"""``--nproc-per-node N`` and torchrun's other options: launch through PyTorch's own elastic
launcher (torchrun), on one node or several.

torchrun starts the ranks as ``python -m gpuopt.runner.rank_entry``, each of which profiles the
user's script as one rank into ``DIR/rank-<RANK>/profile.json`` (torchrun sets RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR/PORT as usual, so the script's ``init_process_group`` works unchanged).
When torchrun returns, this process merges the ranks it finds in DIR into ``DIR/profile.json``
(:func:`gpuopt.assemble.rank_merge.merge_ranks`) and the rules add the job's findings.

Every torchrun option passes through: ``--nnodes``, ``--node-rank``, ``--rdzv-backend``,
``--rdzv-endpoint``, ``--rdzv-id``, ``--master-addr``, ``--master-port``, ``--max-restarts``, and
any other with ``--torchrun-arg``. Without a rendezvous option the run is torchrun's
``--standalone`` (one node). On several nodes each node runs ``gpuopt profile`` with the same
options: with a shared ``-o DIR`` every node's launcher joins the one directory (the job is named
by ``--rdzv-id``, else the rendezvous endpoint or master address) and each writes the merge of
every rank there once the job ends; with a directory per node, ``gpuopt report DIR1 DIR2 ...``
merges them afterwards.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from gpuopt.assemble.rank_merge import merge_ranks
from gpuopt.debug import logger
from gpuopt.errors import GpuoptError
from gpuopt.loading import rank_profiles
from gpuopt.paths import default_run_dir
from gpuopt.runner.finish import write_and_show
from gpuopt.runner.options import ProfileOptions
from gpuopt.runner.run_dir import RunDirectory
from gpuopt.runner.script_output import children_stdout
from gpuopt.script.target import Target

log = logger(__name__)

_NNODES = re.compile(r"^\s*(\d+)\s*(?::\s*(\d+)\s*)?$")
# what gpuopt sets itself: --torchrun-arg may not set it again
_OWN = (
    "--nproc-per-node",
    "--nproc_per_node",
    "-m",
    "--module",
    "--no-python",
    "--no_python",
    "--run-path",
    "--run_path",
    "--standalone",
)


def check_torchrun(opts: ProfileOptions) -> None:
    """Refuse torchrun options that cannot work, with one line (exit 2), before anything runs."""
    tr = opts.torchrun
    if tr.nnodes is not None:
        m = _NNODES.match(tr.nnodes)
        if m is None or int(m.group(1)) < 1 or (m.group(2) and int(m.group(2)) < int(m.group(1))):
            raise GpuoptError(f"--nnodes {tr.nnodes!r}: expected N or MIN:MAX (1 <= MIN <= MAX)")
        fixed = int(m.group(1)) if m.group(2) is None else None
        if fixed is not None and tr.node_rank is not None and tr.node_rank >= fixed:
            raise GpuoptError(f"--node-rank {tr.node_rank}: must be below --nnodes {fixed}")
    for name, value in (
        ("--rdzv-backend", tr.rdzv_backend),
        ("--rdzv-endpoint", tr.rdzv_endpoint),
        ("--rdzv-id", tr.rdzv_id),
        ("--master-addr", tr.master_addr),
    ):
        if value is not None and not value.strip():
            raise GpuoptError(f"{name}: empty value")
    for arg in tr.extra:
        if not arg.startswith("--"):
            raise GpuoptError(
                f"--torchrun-arg {arg!r}: expected one torchrun option, e.g. --log-dir=DIR"
            )
        if arg.split("=", 1)[0] in _OWN:
            raise GpuoptError(f"--torchrun-arg {arg!r}: gpuopt sets {arg.split('=', 1)[0]} itself")


def _torchrun_options(opts: ProfileOptions) -> list[str]:
    tr = opts.torchrun
    out = ["--standalone"] if tr.standalone else []
    if opts.nproc_per_node is not None:
        out.append(f"--nproc-per-node={opts.nproc_per_node}")
    named = (
        ("--nnodes", tr.nnodes),
        ("--node-rank", tr.node_rank),
        ("--rdzv-backend", tr.rdzv_backend),
        ("--rdzv-endpoint", tr.rdzv_endpoint),
        ("--rdzv-id", tr.rdzv_id),
        ("--master-addr", tr.master_addr),
        ("--master-port", tr.master_port),
        ("--max-restarts", tr.max_restarts),
    )
    out += [f"{name}={value}" for name, value in named if value is not None]
    return out + list(tr.extra)


def torchrun_command(opts: ProfileOptions, target: Target, out: Path) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *_torchrun_options(opts),
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
    # what the single-process run applies, every rank applies: run-time fixes, seed, losses
    if opts.fixes is not None:
        cmd += ["--fixes", str(Path(opts.fixes).resolve())]
    if opts.seed is not None:
        cmd += ["--seed", str(opts.seed)]
    if opts.record_losses:
        cmd.append("--record-losses")
    if opts.memory_for is not None:
        cmd += ["--memory-for", opts.memory_for]
    if target.module is not None:
        cmd += ["-m", target.module]
    else:
        cmd += ["--script", target.script or ""]
    return [*cmd, "--", *target.args]


def _run_dir(opts: ProfileOptions, target: Target) -> RunDirectory:
    """One node: the run directory, claimed. Several: joined by every node's launcher."""
    out = opts.out or default_run_dir(target.stem)
    if opts.torchrun.multi_node:
        return RunDirectory.prepare_job(out, opts.torchrun.job_key, force=opts.force)
    run_dir = RunDirectory.prepare(out, force=opts.force, reads=target.files())
    run_dir.claim(target.display, list(target.args))
    return run_dir


def launch(opts: ProfileOptions, target: Target) -> int:
    check_torchrun(opts)
    run_dir = _run_dir(opts, target)
    env = dict(os.environ)
    # torchrun's own default, stated so its warning is not printed
    env.setdefault("OMP_NUM_THREADS", "1")
    # NCCL times each collective on the GPU only when asked before its groups are made
    env.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")
    command = torchrun_command(opts, target, run_dir.path)
    log.debug("torchrun: %s", command)
    try:
        # a document on stdout (--format json/md/html): the ranks' prints go to stderr
        stdout = children_stdout(opts.fmt, opts.quiet)
        proc = subprocess.run(command, env=env, stdout=stdout)
    except KeyboardInterrupt:
        proc = subprocess.CompletedProcess([], 130)
    code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    from gpuopt.findings.engine import add_findings

    ranks = rank_profiles(run_dir.path)
    profile = add_findings(merge_ranks(ranks, code, target.display, list(target.args)))
    return write_and_show(profile, run_dir, opts, note=f" ({len(profile.ranks or [])} ranks)")
