"""What the run-time forms of fixes patched in, and how to take it out: every fix's run-time form
(``runtime.py`` in its folder) records its notes and its undo in one :class:`Applied`, which
:func:`gpuopt.fixes.runtime.apply_fixes` returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpuopt.debug import logger

log = logger(__name__)


@dataclass
class Applied:
    """The patches in place, and how to take them out."""

    notes: list[str] = field(default_factory=list)
    late_notes: list[str] = field(default_factory=list)  # what happened once the run was under way
    _undo: list[Callable[[], None]] = field(default_factory=list)

    def on_undo(self, fn: Callable[[], None]) -> None:
        """``fn`` runs at :meth:`undo` (the undos in reverse order of their registration)."""
        self._undo.append(fn)

    def undo(self) -> None:
        for fn in reversed(self._undo):
            try:
                fn()
            except Exception as exc:  # undoing must never hide how the run ended
                log.debug("a fix not undone: %s", exc, exc_info=True)
        self._undo.clear()


__all__ = ["Applied"]
