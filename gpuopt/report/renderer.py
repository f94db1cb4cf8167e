"""The renderer interface: a typed profile document in, text out."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuopt.model.profile import Profile


class Renderer:
    """Turns a :class:`~gpuopt.model.profile.Profile` into text. Subclasses set ``name`` and
    implement ``render``; they only read the document and never execute anything from it.

    ``color`` only matters to the terminal renderer; ``width`` is the terminal width to lay out for.
    """

    name = "renderer"

    def __init__(self, color: bool = False, width: int = 100) -> None:
        self.color = color
        self.width = width

    def render(self, profile: Profile) -> str:
        raise NotImplementedError
