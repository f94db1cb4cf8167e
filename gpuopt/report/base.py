"""The renderer interface."""

from __future__ import annotations

from typing import Any


class Renderer:
    """Turns a profile document into text. Subclasses set ``name`` and implement ``render``.

    ``color`` only matters to the terminal renderer; ``width`` is the terminal width to lay out for.
    """

    name = "base"

    def __init__(self, color: bool = False, width: int = 100) -> None:
        self.color = color
        self.width = width

    def render(self, doc: dict[str, Any]) -> str:
        raise NotImplementedError
