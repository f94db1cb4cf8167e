"""The end of a run: its record finished into the Profile, written to the run directory, shown.

``gpuopt profile`` ends here, and so does its torchrun launcher with the merged profile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuopt.errors import GpuoptError, say
from gpuopt.model.profile import Profile
from gpuopt.paths import discard_stdout, stdout_usable
from gpuopt.runner.options import ProfileOptions
from gpuopt.runner.run_dir import PROFILE_NAME, RunDirectory

if TYPE_CHECKING:
    from gpuopt.assemble.run_record import RunRecord


def finish_profile(record: RunRecord) -> Profile:
    """The run's record → the typed Profile → the rules' findings."""
    from gpuopt.assemble.run_profile import assemble_run
    from gpuopt.findings.engine import add_findings

    return add_findings(assemble_run(record))


def import_finish() -> None:
    """Import what :func:`finish_profile` runs (the assembly and every rule module) now. Called
    before the script starts: the session's first checkpoint runs it from the sampling thread, and
    importing there takes 20-30 ms of the GIL in the middle of one of the script's steps (a 26 ms
    step among 1 ms ones in a measured window). The same imports the run's end needs anyway."""
    from gpuopt.assemble.run_profile import assemble_run  # noqa: F401
    from gpuopt.findings.engine import registered_rules

    registered_rules()


def import_report(opts: ProfileOptions) -> None:
    """Import the renderer of the report this run will print, at the run's end and before the
    end is timed: the ``overhead`` key's ``end_s`` then counts it (the terminal report's, with
    rich, takes 35-45 ms here; left after the timing, the end read 0.014 s of the ~0.06 s the
    process spent from the script's end to its report printed)."""
    if opts.quiet:
        return
    from gpuopt.report import get_renderer

    try:
        get_renderer(opts.fmt)
    except GpuoptError:  # an unknown format: the report's own call says so, once
        return


def write_and_show(
    profile: Profile, run_dir: RunDirectory, opts: ProfileOptions, note: str = ""
) -> int:
    """Write ``profile.json``, print the report (even when the write failed: the run's answer is
    not lost to a full disk), say where the profile is. The exit code for the command. A script
    that failed before its first step (a SyntaxError, an argparse error) gets one line on stderr
    after its own traceback instead of a text report with nothing in it."""
    try:
        run_dir.write_profile(profile)
        unwritten = None
    except GpuoptError as exc:
        unwritten = exc
    early = early_end(profile) if not opts.quiet and opts.fmt == "text" else None
    unshown = show_report(profile, opts.fmt) if not opts.quiet and early is None else None
    if unwritten is not None:
        raise unwritten
    said = f"{early}; profile written to" if early else "profile written to"
    say(f"gpuopt: {said} {run_dir.shown}/{PROFILE_NAME}{note}")
    if unshown is not None:
        raise unshown
    # None only in a profile written before an exec, and then this process never gets here
    return profile.exit_code or 0


def early_end(profile: Profile) -> str | None:
    """Why there is nothing to report, when the script failed before its first step and no
    probe found anything (no finding, no memory or compile record), else None."""
    from gpuopt.model.profile import RunError

    if profile.status != "error" or profile.steps.count or profile.findings:
        return None
    if profile.memory or profile.compile:  # an OOM post-mortem, a compile: worth the report
        return None
    error = profile.error if isinstance(profile.error, RunError) else None
    if error is None:
        why = f"exit code {profile.exit_code}"
    elif error.type == "SystemExit":
        why = f"sys.exit({error.message})" if error.message.isdigit() else "sys.exit"
    else:
        why = error.type
    return f"the script ended ({why}) before its first step, so nothing was measured"


def show_report(profile: Profile, fmt: str) -> GpuoptError | None:
    """Print the report. A reader that went away (``| head``) ends the printing, not the run:
    the profile is on disk and the exit code stays the script's. A stdout the script closed
    (``sys.stdout.close()``, ``os.close(1)``) or that gpuopt was started without (``>&-``) gets
    no report, as it would get nothing more from python. A stdout that fails (``> /dev/full``):
    the one-line error, returned for the caller to end with once the profile is written."""
    from gpuopt.report import print_report

    if not stdout_usable():
        return None
    try:
        print_report(profile, fmt)
    except BrokenPipeError:
        discard_stdout()  # what is still buffered would fail again at interpreter exit
    except GpuoptError as exc:
        return exc
    return None
