"""How the user's code ended: a run's status, exit code and error."""

from __future__ import annotations

from msgspec import Struct, field

from gpuopt.model.profile import (
    RunError,
    Status,
)


class Outcome(Struct):
    """How the user's code ended."""

    status: Status
    exit_code: int
    error: RunError | None = None
    stopped_by_steps: bool = False
    # the script's exception: its traceback's (file, line) pairs, outermost first (no frames
    # kept: their locals would stay alive)
    error_frames: list[tuple[str, int]] = field(default_factory=list)
