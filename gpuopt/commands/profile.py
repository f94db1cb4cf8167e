"""``gpuopt profile``: run the user's code with the probes on, then write and show the profile.

One way through: check the target → prepare the run directory → the measuring session (probes)
→ assemble the Profile → the rules add findings → write ``profile.json`` → print the report.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NoReturn

from gpuopt.defaults import SAMPLE_INTERVAL_MAX_S, SAMPLE_INTERVAL_MIN_S
from gpuopt.errors import GpuoptError, fail
from gpuopt.model.profile import Profile, RunError
from gpuopt.paths import default_run_dir
from gpuopt.runner.finish import write_and_show
from gpuopt.runner.options import ProfileOptions
from gpuopt.runner.run_dir import RunDirectory
from gpuopt.runner.script_output import report_on_stdout, script_stdout_to_stderr
from gpuopt.script.held_sigterm import end_by_sigterm, held_sigterm
from gpuopt.script.target import Target, check_target, flush_late_signals

if TYPE_CHECKING:
    pass
from gpuopt.runner.measure import measure


def run_profile(opts: ProfileOptions) -> NoReturn:
    """The ``profile`` command as both entry paths run it (typer's, and gpuopt.commands.entry's
    fast one): exits with the script's exit code, or 2 with a one-line reason for bad input."""
    try:
        code = profile_command(opts)
    except GpuoptError as exc:
        flush_late_signals()
        fail(str(exc))
    flush_late_signals()  # what the script's signal handlers raised once it had ended
    raise SystemExit(code)


def profile_command(opts: ProfileOptions) -> int:
    """Validate, run, write ``profile.json``, print the report. Returns the script's exit code
    (2 with a one-line reason when the profile could not be written; the report still shows)."""
    check_interval(opts.sample_interval)
    target = Target(opts.script, opts.module, list(opts.args))
    check_target(target)
    if opts.memory_for is not None:
        from gpuopt.memory.devices import device_memory

        device_memory(opts.memory_for)  # refused before anything runs, with a one-line reason
    if opts.fixes is not None:
        from gpuopt.fixes.runtime import load_fixes

        load_fixes(opts.fixes)  # refused before anything runs, with a one-line reason
    if opts.launches:
        from gpuopt.runner.torchrun import launch

        return launch(opts, target)
    out = opts.out or default_run_dir(target.stem)
    run_dir = RunDirectory.prepare(out, force=opts.force, reads=target.files())
    with held_sigterm():  # a SIGTERM outside the script waits for the profile
        with script_stdout_to_stderr(report_on_stdout(opts.fmt, opts.quiet)):
            profile = measure(target, run_dir, opts)
        if not isinstance(profile, Profile):  # a child the script forked: its own exit only
            return profile.exit_code
        code = write_and_show(profile, run_dir, opts)
    if isinstance(profile.error, RunError) and profile.error.type == "SIGTERM":
        end_by_sigterm()
    return code


def check_interval(seconds: float) -> None:
    """``--sample-interval``: a finite number of seconds in the sampler's range (the CLI says
    so first; this holds for every caller of the runner)."""
    if not math.isfinite(seconds) or not SAMPLE_INTERVAL_MIN_S <= seconds <= SAMPLE_INTERVAL_MAX_S:
        raise GpuoptError(
            f"--sample-interval {seconds}: give a number of seconds from {SAMPLE_INTERVAL_MIN_S} "
            f"to {SAMPLE_INTERVAL_MAX_S:g}"
        )
