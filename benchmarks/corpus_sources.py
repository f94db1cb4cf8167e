"""The corpus's scripts taken from public repositories at set-up (benchmarks/corpus/sources.toml).

Public code is not kept in this repository: each source names a repository, a commit and, for
every file it needs, the file's git blob id. :func:`materialize` finds a local git snapshot of
the repository under a folder of snapshots (``DIR/OWNER+NAME/repo``, ``.../repo/.git`` or
``DIR/OWNER+NAME`` itself, bare or not: a ``git clone`` there does), checks that each file at the
pinned commit is that blob, and copies it, as it is, to ``.cache/sources/NAME/PATH``. A missing
snapshot, commit or file is a :class:`Missing` naming what to fetch; nothing is downloaded.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import tomllib


class Missing(Exception):
    """A source's snapshot, commit or file is not here (the message says which)."""


@dataclass(frozen=True)
class Source:
    name: str
    repo: str
    commit: str
    licence: str
    files: dict[str, str]  # upstream path -> git blob id


def parse_sources(text: str) -> dict[str, Source]:
    out = {}
    for raw in tomllib.loads(text).get("source", []):
        src = Source(raw["name"], raw["repo"], raw["commit"], raw["licence"], dict(raw["files"]))
        if src.name in out:
            raise ValueError(f"sources.toml: {src.name!r} twice")
        if "LICENSE" not in src.files:
            raise ValueError(f"sources.toml: {src.name!r} copies no LICENSE")
        out[src.name] = src
    return out


def load_sources(path: Path) -> dict[str, Source]:
    return parse_sources(path.read_text(encoding="utf8"))


def git_dir(snapshots: Path, repo: str) -> Path:
    """The git directory of ``repo``'s snapshot under ``snapshots``."""
    base = snapshots / repo.replace("/", "+")
    for cand in (base / "repo", base / "repo" / ".git", base / ".git", base):
        if (cand / "objects").is_dir():
            return cand
    raise Missing(f"no snapshot of {repo} under {snapshots} (a git clone at {base} does)")


def _git(gdir: Path, *args: str) -> bytes:
    proc = subprocess.run(["git", "--git-dir", str(gdir), *args], capture_output=True, check=False)
    if proc.returncode != 0:
        raise Missing(f"git {' '.join(args)} in {gdir}: {proc.stderr.decode().strip()}")
    return proc.stdout


def materialize(src: Source, snapshots: Path, dest: Path) -> Path:
    """Copy ``src``'s files from its snapshot into ``dest`` (once: a marker file records the
    commit); each checked against its blob id. Returns ``dest``."""
    marker = dest / ".source"
    files = "".join(f"{p} {b}\n" for p, b in sorted(src.files.items()))
    want = f"{src.repo} {src.commit}\n{files}"
    if marker.is_file() and marker.read_text() == want:
        return dest
    gdir = git_dir(snapshots, src.repo)
    for path, blob in src.files.items():
        at = _git(gdir, "rev-parse", f"{src.commit}:{path}").decode().strip()
        if at != blob:
            raise Missing(f"{src.repo}@{src.commit[:12]}:{path} is blob {at}, not {blob}")
        data = _git(gdir, "cat-file", "blob", blob)
        out = dest / path
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
    marker.write_text(want)
    return dest
