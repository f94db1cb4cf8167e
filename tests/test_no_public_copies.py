"""No copy of another project's code or data is committed under benchmarks/ or tests/data/ (the
project's reference traces, REFERENCE, aside): public scripts and traces are named by a manifest
(benchmarks/corpus/sources.toml, tests/data/public.toml) and put in place at set-up from local
snapshots, never kept in this repository. A committed file fails here if it is another project's
LICENSE, opens with a copyright or licence header, or is byte for byte a file a manifest names."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, load_benchmark

cs = load_benchmark("corpus_sources")
WHERE = ("benchmarks", "tests/data")
# the project's reference folder (../shared/traces, given to this project with its MANIFEST and
# licences), copied so that a clone runs every test: not taken from a public repository by us
REFERENCE = ("tests/data/shared/traces/hta/", "tests/data/shared/traces/kineto_tb_plugin/")
MANIFESTS = (
    ROOT / "benchmarks" / "corpus" / "sources.toml",
    ROOT / "tests" / "data" / "public.toml",
)
LICENCE_NAME = re.compile(r"^(LICEN[CS]E|COPYING|NOTICE)([.-].*)?$", re.IGNORECASE)
# what a licence or copyright header says, in a file's first lines
HEADER = re.compile(
    r"copyright\s*(\(c\)|©|\d{4})|SPDX-License-Identifier|licensed under the|"
    r"permission is hereby granted|redistribution and use in source and binary forms|"
    r"all rights reserved|\b(Apache-2\.0|BSD-3-Clause|MIT License|L?GPL-?\d)\b",
    re.IGNORECASE,
)
HEADER_BYTES = 4000


def committed() -> list[Path]:
    """The files git tracks under WHERE (skipped outside a git checkout)."""
    out = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--", *WHERE], capture_output=True, check=False
    )
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    names = [p for p in out.stdout.decode().split("\0") if p and not p.startswith(REFERENCE)]
    return [ROOT / p for p in names if (ROOT / p).is_file()]


def foreign(path: Path, public_blobs: set[str]) -> str | None:
    """Why ``path`` looks like a copy of another project's file (None: it does not)."""
    if LICENCE_NAME.match(path.name):
        return "a licence file"
    if path.stat().st_size and cs.blob_id(path) in public_blobs:  # an empty file is anyone's
        return "a file a manifest names (set up from its snapshot, never committed)"
    if path.suffix in (".md", ".gz") or path in MANIFESTS:  # docs and manifests name licences
        return None
    head = path.read_bytes()[:HEADER_BYTES].decode("utf-8", errors="replace")
    found = HEADER.search(head)
    return f"a licence header ({found.group(0)!r})" if found else None


def public_blobs() -> set[str]:
    return {b for m in MANIFESTS for s in cs.load_sources(m).values() for b in s.files.values()}


def test_no_committed_file_is_another_projects() -> None:
    files = committed()
    assert any(p.name == "sources.toml" for p in files)  # the listing did find the tree
    blobs = public_blobs()
    bad = {str(p.relative_to(ROOT)): why for p in files if (why := foreign(p, blobs))}
    assert bad == {}, "copies of other projects' files (see tests/data/public.toml):\n" + "\n".join(
        f"  {p}: {why}" for p, why in sorted(bad.items())
    )


@pytest.mark.parametrize(
    ("name", "text", "flagged"),
    [
        ("LICENSE", "MIT License\n", "a licence file"),
        ("LICENCE.txt", "whatever\n", "a licence file"),
        ("main.py", "# Copyright (c) 2017 Someone\nimport torch\n", "a licence header"),
        ("utils.py", "# SPDX-License-Identifier: Apache-2.0\n", "a licence header"),
        ("train.py", '"""Licensed under the Apache License, Version 2.0"""\n', "a licence header"),
        ("ours.py", "# gpuopt's own script\nimport torch\n", None),
        ("README.md", "Copyright (c) 2017 Someone, MIT License\n", None),
    ],
)
def test_a_copy_is_told_from_our_own_file(
    name: str, text: str, flagged: str | None, tmp_path: Path
) -> None:
    path = tmp_path / name
    path.write_text(text)
    why = foreign(path, set())
    assert (why is None) if flagged is None else (why is not None and why.startswith(flagged))


def test_a_file_a_manifest_names_is_flagged_by_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "trace.json.gz"
    path.write_bytes(b"\x1f\x8b public bytes")
    assert foreign(path, set()) is None
    assert foreign(path, {cs.blob_id(path)}) is not None
    assert len(public_blobs()) > 30  # the manifests were read
