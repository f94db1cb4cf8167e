"""Sites (``path/to/file.py:42``) as links: the HTML report opens the line in VS Code or the
file in the browser. Links are made absolute with the run's ``cwd`` and percent-encoded; where
that cannot be done honestly there is no link, only text. Never touches the disk."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath, PureWindowsPath
from urllib.parse import quote

from gpuopt.units import site_line, text


@dataclass(frozen=True)
class SiteLinks:
    """Where a site points on disk, and the two links the HTML report offers for it."""

    path: str  # absolute path as text
    line: int
    vscode: str  # vscode://file/<abs>:<line>:1 (opens the editor at the line)
    file: str  # file:///<abs> (opens the file in the browser)


def split_site(site: str | None) -> tuple[str, int | None]:
    """``"src/train.py:42"`` → ``("src/train.py", 42)``; a site without a line keeps None."""
    s = text(site)
    return site_line(s) or (s, None)


def site_links(site: str | None, cwd: str | None) -> SiteLinks | None:
    """Links for a site, made absolute with the run's ``cwd``; None when that cannot be done
    honestly (no line number, a pseudo-file such as ``<stdin>``, or a relative path and no cwd)."""
    path, line = split_site(site)
    if line is None or not path or path.startswith("<"):
        return None
    abs_path = _absolute(path, text(cwd))
    if abs_path is None:
        return None
    url_path = _url_path(abs_path)
    return SiteLinks(
        path=abs_path,
        line=line,
        vscode=f"vscode://file{url_path}:{line}:1",
        file=f"file://{url_path}",
    )


def _is_windows_absolute(path: str) -> bool:
    win = PureWindowsPath(path)
    return bool(win.drive and win.root)


def _absolute(path: str, cwd: str) -> str | None:
    if _is_windows_absolute(path):
        return str(PureWindowsPath(path))
    if path.startswith("/"):
        return str(PurePosixPath(path))
    if not cwd:
        return None
    if _is_windows_absolute(cwd):
        return str(PureWindowsPath(cwd) / path)
    if not cwd.startswith("/"):
        return None
    return _normalised(cwd, path)


def _normalised(cwd: str, path: str) -> str:
    """``cwd/path`` with "a/../b" and "." resolved lexically (the file may no longer exist)."""
    parts: list[str] = []
    for part in PurePosixPath(cwd, path).parts[1:]:
        if part == "..":
            if parts:
                parts.pop()
        elif part not in (".", ""):
            parts.append(part)
    return "/" + "/".join(parts)


def _url_path(abs_path: str) -> str:
    """Percent-encoded URL path ("/C:/x" for Windows drives); only unreserved characters, "/" and
    a drive colon stay literal, so quotes, spaces, "<", "#" and "?" can never end the URL."""
    win = PureWindowsPath(abs_path)
    if win.drive and win.root:
        rest = abs_path[len(win.drive) :].replace("\\", "/")
        return "/" + quote(win.drive, safe=":") + quote(rest, safe="/")
    return quote(abs_path, safe="/")
