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
    importing there took 20-30 ms of the GIL in the middle of one of the script's steps (a 26 ms
    step among 1 ms ones in a measured window). The same imports the run's end needs anyway."""
    from gpuopt.assemble.run_profile import assemble_run  # noqa: F401
    from gpuopt.findings.engine import registered_rules

    registered_rules()


def write_and_show(
    profile: Profile, run_dir: RunDirectory, opts: ProfileOptions, note: str = ""
) -> int:
    """Write ``profile.json``, print the report (even when the write failed: the run's answer is
    not lost to a full disk), say where the profile is. The exit code for the command."""
    try:
        run_dir.write_profile(profile)
        unwritten = None
    except GpuoptError as exc:
        unwritten = exc
    unshown = show_report(profile, opts.fmt) if not opts.quiet else None
    if unwritten is not None:
        raise unwritten
    say(f"gpuopt: profile written to {run_dir.shown}/{PROFILE_NAME}{note}")
    if unshown is not None:
        raise unshown
    return profile.exit_code


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
