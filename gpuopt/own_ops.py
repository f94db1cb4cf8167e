"""gpuopt's own tensor ops inside the script's step, kept out of what the probes record.

``--record-losses`` keeps a copy of each loss at its ``backward()`` (``detach``, ``clone``,
``reshape``): three tensor calls made from gpuopt's code while the user's line runs. Seen by the
dispatch recorder they would count as the user's own calls of that line (three more executions
of ``loss.backward()`` a step, making the training loop look like a loop of four iterations a
step) and by the memory probe's program recorder as calls of the step. A probe whose modes
record the script's calls registers itself here while it records; :func:`own_ops` tells each
one, for the duration of gpuopt's own calls, to let them through unrecorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol


class Quiet(Protocol):
    """A probe that can let calls through unrecorded."""

    def quiet(self, on: bool) -> bool:
        """Let calls through unrecorded (``on``) or record again; returns the previous state."""
        ...


_LISTENING: list[Quiet] = []


def listen(probe: Quiet) -> None:
    """``probe`` records the script's calls from now on (until :func:`unlisten`)."""
    if not any(p is probe for p in _LISTENING):
        _LISTENING.append(probe)


def unlisten(probe: Quiet) -> None:
    _LISTENING[:] = [p for p in _LISTENING if p is not probe]


@contextmanager
def own_ops() -> Iterator[None]:
    """gpuopt's own tensor calls run inside: no registered probe records them."""
    if not _LISTENING:
        yield
        return
    was = [(p, p.quiet(True)) for p in list(_LISTENING)]
    try:
        yield
    finally:
        for p, before in reversed(was):
            p.quiet(before)
