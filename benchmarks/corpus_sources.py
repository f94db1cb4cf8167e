"""Public files taken at set-up from local git snapshots (benchmarks/corpus/sources.toml, and
tests/data/public.toml for the tests' data), never kept in this repository.

Each source names a repository, a commit and, for every file it needs, the file's git blob id.
:func:`materialize` finds a local git snapshot of the repository under a folder of snapshots
(``DIR/OWNER+NAME/repo``, ``.../repo/.git`` or ``DIR/OWNER+NAME`` itself, bare or not: a ``git
clone`` there does), checks that each file at the pinned commit is that blob, and copies it, as
it is, into a git-ignored folder. A file already there as that blob is kept; one found as that
blob in a reference folder (the project's ``../shared``) is linked, not copied. A missing
snapshot, commit or file is a :class:`Missing` naming what to fetch; nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

# where the sources' repositories have their git snapshots (DIR/OWNER+NAME/...)
SNAPSHOTS = Path(os.environ.get("GPUOPT_CORPUS_SNAPSHOTS", "/work/.mirror"))


class Missing(Exception):
    """A source's snapshot, commit or file is not here (the message says which)."""


@dataclass(frozen=True)
class Source:
    name: str
    repo: str
    commit: str
    licence: str
    files: dict[str, str]  # upstream path -> git blob id
    scripts: str | None = None  # the folder of the corpus's scripts tree it is copied to
    into: str = ""  # the folder (under the destination) its files go to
    strip: str = ""  # a prefix of the upstream paths left out of the copies' paths
    to: dict[str, str] = field(default_factory=dict)  # upstream path -> its copy's path

    def local(self, path: str) -> str:
        """Where the copy of upstream ``path`` lies, relative to the destination."""
        rel = self.to.get(path, path.removeprefix(self.strip))
        return f"{self.into}/{rel}" if self.into else rel


def _files(name: str, raw: dict[str, object]) -> tuple[dict[str, str], dict[str, str]]:
    """A ``[source.files]`` table: ``PATH = BLOB`` or ``PATH = {blob = BLOB, to = COPY}``."""
    blobs, to = {}, {}
    for path, value in raw.items():
        if isinstance(value, dict):
            blobs[path], to[path] = str(value["blob"]), str(value["to"])
        elif isinstance(value, str):
            blobs[path] = value
        else:
            raise ValueError(f"sources: {name!r}: {path!r} is neither a blob id nor a table")
    return blobs, to


def parse_sources(text: str) -> dict[str, Source]:
    out = {}
    for raw in tomllib.loads(text).get("source", []):
        files, to = _files(raw["name"], raw["files"])
        src = Source(
            raw["name"], raw["repo"], raw["commit"], raw["licence"], files,
            scripts=raw.get("scripts"), into=raw.get("into", ""), strip=raw.get("strip", ""),
            to=to,
        )  # fmt: skip
        if src.name in out:
            raise ValueError(f"sources: {src.name!r} twice")
        if not any(Path(src.local(p)).name == "LICENSE" for p in src.files):
            raise ValueError(f"sources: {src.name!r} copies no LICENSE")
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


def blob_id(path: Path) -> str:
    """``git hash-object PATH``: the id git gives the file's bytes."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _is(path: Path, blob: str) -> bool:
    return path.is_file() and blob_id(path) == blob


def _put(out: Path, data: bytes | None = None, link: Path | None = None) -> None:
    """``out`` written as ``data``, or made a link to ``link``, in one step (a temporary name
    renamed over it: several test processes may set the same file up at once). Its folder is
    made only here, so a source that is not had leaves no empty folder."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    if link is not None:
        tmp.symlink_to(link)
    else:
        tmp.write_bytes(data or b"")
    os.replace(tmp, out)


def materialize(src: Source, snapshots: Path, dest: Path, shared: Path | None = None) -> Path:
    """Put ``src``'s files under ``dest`` (each at :meth:`Source.local`), each checked against
    its blob id: kept where already there, linked to ``shared``'s copy where that is the blob,
    else copied from the snapshot. Returns ``dest``."""
    gdir: Path | None = None
    for path, blob in src.files.items():
        out = dest / src.local(path)
        if _is(out, blob):
            continue
        if shared is not None and _is(shared / src.local(path), blob):
            _put(out, link=(shared / src.local(path)).resolve())
            continue
        gdir = gdir or git_dir(snapshots, src.repo)
        at = _git(gdir, "rev-parse", f"{src.commit}:{path}").decode().strip()
        if at != blob:
            raise Missing(f"{src.repo}@{src.commit[:12]}:{path} is blob {at}, not {blob}")
        _put(out, data=_git(gdir, "cat-file", "blob", blob))
    return dest


def scripts_tree(sources: dict[str, Source], snapshots: Path, dest: Path) -> dict[str, str]:
    """The scripts tree (``dest``): each source with a ``scripts`` folder copied there. Returns
    what is missing: source name -> why."""
    missing = {}
    for src in sources.values():
        if src.scripts is None:
            continue
        try:
            materialize(src, snapshots, dest / src.scripts)
        except Missing as exc:
            missing[src.name] = str(exc)
    return missing


def main() -> int:
    """``python benchmarks/corpus_sources.py [--snapshots DIR] NAME ...``: each source of
    sources.toml put in benchmarks/corpus/.cache/sources/NAME/ (its folder printed)."""
    import argparse
    import sys

    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description="set up sources of benchmarks/corpus/sources.toml")
    ap.add_argument("--snapshots", type=Path, default=SNAPSHOTS, help="OWNER+NAME/ snapshots")
    ap.add_argument("names", nargs="+", help="source names (sources.toml)")
    args = ap.parse_args()
    sources = load_sources(here / "corpus" / "sources.toml")
    for name in args.names:
        if name not in sources:
            ap.error(f"no source {name!r} in sources.toml")
        try:
            print(materialize(sources[name], args.snapshots, here / "corpus/.cache/sources" / name))
        except Missing as exc:
            print(f"corpus_sources: error: {name}: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
