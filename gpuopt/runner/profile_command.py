"""``gpuopt profile``: run the user's code with the probes on, then write and show the profile.

One way through: check the target → prepare the run directory → the measuring session (probes)
→ assemble the Profile → the rules add findings → write ``profile.json`` → print the report.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

from gpuopt.errors import GpuoptError, fail
from gpuopt.model.profile import Profile
from gpuopt.runner.options import ProfileOptions
from gpuopt.runner.run_dir import default_out_dir, prepare_out_dir, write_profile
from gpuopt.runner.target import Target, check_target


def run_profile(opts: ProfileOptions) -> NoReturn:
    """The ``profile`` command as both entry paths run it (typer's, and gpuopt.entry's fast one):
    exits with the script's exit code, or 2 with a one-line reason for bad input."""
    try:
        code = profile_command(opts)
    except GpuoptError as exc:
        fail(str(exc))
    raise SystemExit(code)


def profile_command(opts: ProfileOptions) -> int:
    """Validate, run, write ``profile.json``, print the report. Returns the script's exit code."""
    target = Target(opts.script, opts.module, list(opts.args))
    check_target(target)
    if opts.nproc_per_node is not None:
        from gpuopt.runner.torchrun import launch

        return launch(opts, target)
    out = prepare_out_dir(opts.out or default_out_dir(target.stem))
    profile = measure(target, out, opts)
    if not opts.quiet:
        from gpuopt.report import print_report

        print_report(profile, opts.fmt)
    print(f"gpuopt: profile written to {out / 'profile.json'}", file=sys.stderr)
    return profile.exit_code


def measure(target: Target, out: Path, opts: ProfileOptions, rank: int | None = None) -> Profile:
    """One instrumented run of ``target`` into the run directory ``out``: its Profile, written."""
    from gpuopt.assemble.run_profile import assemble_run
    from gpuopt.findings.engine import add_findings
    from gpuopt.runner.session import ProfileSession

    record = ProfileSession(target, out, opts, rank=rank).run()
    profile = add_findings(assemble_run(record))
    write_profile(profile, out)
    return profile
