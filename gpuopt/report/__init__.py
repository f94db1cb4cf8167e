"""Renderers: small classes behind one ``render(profile) -> str`` interface, chosen by name or by
the output file's extension. They read a typed :class:`~gpuopt.model.profile.Profile` and never
execute anything from it.

Import-light on purpose (``gpuopt report`` imports this first): the renderers and the model are
imported when they are used.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gpuopt.errors import GpuoptError
from gpuopt.report.renderer import Renderer

if TYPE_CHECKING:
    from gpuopt.model.profile import Profile

FORMATS = ("text", "json", "md", "html")
_EXTENSIONS = {
    ".txt": "text",
    ".json": "json",
    ".md": "md",
    ".markdown": "md",
    ".html": "html",
    ".htm": "html",
}


def format_for_path(path: Path | None) -> str | None:
    """The format an output file's extension asks for, or None."""
    if path is None:
        return None
    return _EXTENSIONS.get(path.suffix.lower())


def terminal_width(default: int = 100) -> int:
    """Lay out for the terminal we print to, at most 100 columns (the text report is tried down
    to 60)."""
    import shutil

    return max(60, min(default, shutil.get_terminal_size((default, 24)).columns))


def get_renderer(name: str) -> Renderer:
    if name == "text":
        from gpuopt.report.text import TextRenderer

        return TextRenderer()
    if name == "json":
        from gpuopt.report.jsonfmt import JsonRenderer

        return JsonRenderer()
    if name == "md":
        from gpuopt.report.markdown import MarkdownRenderer

        return MarkdownRenderer()
    if name == "html":
        from gpuopt.report.html import HtmlRenderer

        return HtmlRenderer()
    raise GpuoptError(f"unknown report format {name!r}; choose one of: {', '.join(FORMATS)}")


def print_report(profile: Profile, fmt: str = "text") -> None:
    """Render ``profile`` to stdout, laid out (and coloured) for the terminal when it is one."""
    import sys

    from gpuopt.paths import write_stdout

    renderer = get_renderer(fmt)
    if sys.stdout is not None and not sys.stdout.closed and sys.stdout.isatty():
        renderer.color = fmt == "text"
        renderer.width = terminal_width()
    write_stdout(renderer.render(profile))


__all__ = [
    "print_report",
    "FORMATS",
    "Renderer",
    "format_for_path",
    "get_renderer",
    "terminal_width",
]
