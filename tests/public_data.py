"""The public data files the tests read (tests/data/public.toml), put in place, never committed.

    python tests/public_data.py [--snapshots DIR]

Each file goes to its folder under tests/data/ (git-ignored): linked to the project's reference
folder (``../shared``, beside the repository) where that holds the same blob, else copied from a
local git snapshot of its repository (benchmarks/corpus_sources.py), checked against its blob
id. A test session does the same once (tests/conftest.py); a test whose file is missing skips.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
MANIFEST = DATA / "public.toml"


def corpus_sources() -> ModuleType:
    """benchmarks/corpus_sources.py (benchmarks/ is not a package)."""
    if "corpus_sources" in sys.modules:
        return sys.modules["corpus_sources"]
    path = ROOT / "benchmarks" / "corpus_sources.py"
    spec = importlib.util.spec_from_file_location("corpus_sources", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["corpus_sources"] = module
    spec.loader.exec_module(module)
    return module


def setup(snapshots: Path | None = None) -> dict[str, str]:
    """Every source of the manifest in place; returns what is missing (source name -> why)."""
    cs = corpus_sources()
    missing = {}
    for src in cs.load_sources(MANIFEST).values():
        ref = ROOT.parent if src.into.startswith("shared/") else None  # ../shared/traces/...
        try:
            cs.materialize(src, snapshots or cs.SNAPSHOTS, DATA, shared=ref)
        except cs.Missing as exc:
            missing[src.name] = str(exc)
    return missing


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snapshots", type=Path, help="folder of git snapshots (OWNER+NAME/...)")
    missing = setup(ap.parse_args().snapshots)
    for name, why in missing.items():
        print(f"{name}: not set up: {why}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
