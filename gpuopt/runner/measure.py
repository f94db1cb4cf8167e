"""One instrumented run of the target into its run directory: its Profile, not yet written."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuopt.model.profile import Profile
from gpuopt.runner.finish import finish_profile, import_finish, import_report
from gpuopt.runner.options import ProfileOptions
from gpuopt.runner.run_dir import RunDirectory
from gpuopt.script.target import Target

if TYPE_CHECKING:
    from gpuopt.runner.session import ChildExit


def measure(
    target: Target, run_dir: RunDirectory, opts: ProfileOptions, rank: int | None = None
) -> Profile | ChildExit:
    """One instrumented run of ``target`` into ``run_dir``: its Profile, not yet written (the
    session writes its placeholder and checkpoints while the script runs)."""
    from gpuopt.assemble.overhead import with_end
    from gpuopt.runner.session import ChildExit, ProfileSession

    import_finish()
    session = ProfileSession(target, run_dir, opts, rank=rank, finish=finish_profile)
    result = session.run()
    if isinstance(result, ChildExit):
        return result
    profile = finish_profile(result)
    import_report(opts)  # the report's renderer: its import is the end's largest part
    with_end(profile, session.clock() - session.t_end)  # the session's clock: perf_counter
    return profile
