"""The compatibility matrix: one venv per entry under .venv-matrix/NAME, the suite run in each,
and a table of passed / failed / skipped per entry (docs/compatibility.md).

Entries: ``torch-V`` for the oldest torch pyproject.toml supports, CI's and the newest
installable, every other dependency at its newest; ``floors``: every dependency at its floor
(ci/floors.txt, which tests/test_dependencies.py keeps equal to pyproject.toml's lower bounds)
with the oldest torch.

    python3 ci/test_matrix.py                          # every entry, the whole suite
    python3 ci/test_matrix.py floors torch-2.14.1      # those entries only
    python3 ci/test_matrix.py --pytest-args "-q tests/test_cli_entry.py" floors
    python3 ci/test_matrix.py --print-floors           # pyproject's lower bounds as pins

A venv is built once (``.venv-matrix/NAME/.installed`` records what it was built from) and kept:
a second run reuses it, ``--rebuild`` builds it anew. Installs go through pip, so pip's own
configuration (find-links, indexes, constraints) applies. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MATRIX_DIR = ROOT / ".venv-matrix"
FLOORS = ROOT / "ci" / "floors.txt"
CI_TORCH = "2.13.0"  # the project venv's and CI's (Makefile TORCH_SPEC)
NEWEST_TORCH = "2.14.1"  # the newest the package index here serves


@dataclass(frozen=True)
class Entry:
    name: str
    torch: str
    floors: bool = False

    def spec(self) -> str:
        """What the venv is built from: a new spec means a new venv."""
        parts = [f"torch=={self.torch}"]
        if self.floors:
            parts.append(FLOORS.read_text(encoding="utf-8"))
        return "\n".join(parts)


def lower_bounds(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """pyproject.toml's runtime dependencies as ``name==floor`` pins (markers kept), torch left
    out: each matrix entry chooses its torch."""
    import tomllib

    pins = []
    for dep in tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]:
        req, _, marker = dep.partition(";")
        name = re.split(r"[<>=!~ \[]", req, maxsplit=1)[0].strip()
        floor = re.search(r">=\s*([^,\s]+)", req)
        if name == "torch":
            continue
        if floor is None:
            raise SystemExit(f"{name}: no lower bound in pyproject.toml")
        pins.append(f"{name}=={floor.group(1)}" + (f"; {marker.strip()}" if marker else ""))
    return pins


def floors_text() -> str:
    head = (
        "# Every runtime dependency at its floor: pyproject.toml's lower bounds, written by\n"
        "# `python3 ci/test_matrix.py --print-floors > ci/floors.txt`\n"
        "# (tests/test_dependencies.py fails when the two differ). torch is the matrix entry's.\n"
    )
    return head + "".join(p + "\n" for p in lower_bounds())


def torch_floor(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The oldest torch pyproject.toml supports, as a release ("2.13" -> "2.13.0")."""
    import tomllib

    for dep in tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]:
        found = re.match(r"torch\s*>=\s*([^,\s;]+)", dep)
        if found:
            version = found.group(1)
            return version + ".0" * (2 - version.count("."))
    raise SystemExit("pyproject.toml declares no torch lower bound")


def entries(oldest_torch: str) -> list[Entry]:
    """The oldest supported torch, CI's and the newest, each with the newest dependencies, and
    every dependency at its floor with the oldest torch."""
    versions = (oldest_torch, CI_TORCH, NEWEST_TORCH)
    found = [Entry(f"torch-{v}", v) for v in dict.fromkeys(versions)]
    found.append(Entry("floors", torch_floor(), floors=True))
    return found


def _pip(py: Path, *args: str) -> None:
    subprocess.run([str(py), "-m", "pip", "install", "-q", *args], check=True, cwd=ROOT)


def dev_tools() -> list[str]:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return [str(s) for s in project["optional-dependencies"]["dev"]]


def build(entry: Entry, rebuild: bool, torch_index: str = "") -> Path:
    """The entry's venv, built unless it was built from the same spec before."""
    venv = MATRIX_DIR / entry.name
    marker = venv / ".installed"
    py = venv / "bin" / "python"
    if not rebuild and marker.exists() and marker.read_text(encoding="utf-8") == entry.spec():
        return py
    print(f"[{entry.name}] building {venv.relative_to(ROOT)}", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    _pip(py, "--upgrade", "pip")
    index = ["--index-url", torch_index] if torch_index else []
    _pip(py, *index, f"torch=={entry.torch}")
    if entry.floors:
        # the floors first, then gpuopt without its dependencies, then the dev tools held to
        # the floors (-c) so that none of them lifts a floor
        _pip(py, "-r", str(FLOORS))
        _pip(py, "--no-deps", "-e", str(ROOT))
        _pip(py, "-c", str(FLOORS), *dev_tools())
    else:
        constraints = [f"torch=={entry.torch}"]
        cfile = venv / "constraints.txt"
        cfile.write_text("".join(c + "\n" for c in constraints), encoding="utf-8")
        _pip(py, "-c", str(cfile), "-e", f"{ROOT}[dev]")
    marker.write_text(entry.spec(), encoding="utf-8")
    return py


def counts(summary: str) -> dict[str, int]:
    """pytest's closing line (``3 failed, 120 passed, 4 skipped in 9.1s``) as numbers."""
    found = {k: 0 for k in ("passed", "failed", "skipped", "errors")}
    for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", summary):
        found["errors" if word.startswith("error") else word] += int(n)
    return found


def run_suite(entry: Entry, py: Path, pytest_args: list[str]) -> dict[str, object]:
    log = MATRIX_DIR / entry.name / "pytest.log"
    start = time.monotonic()
    with log.open("w", encoding="utf-8") as out:
        proc = subprocess.run(
            [str(py), "-m", "pytest", "-p", "no:cacheprovider", "-rs", *pytest_args],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
    lines = [ln for ln in log.read_text(encoding="utf-8").splitlines() if ln.strip()]
    summary = next((ln for ln in reversed(lines) if re.search(r"\d+ (passed|failed)", ln)), "")
    versions = subprocess.run(
        [str(py), "-c", "import torch, numpy; print(torch.__version__, numpy.__version__)"],
        capture_output=True,
        text=True,
    ).stdout.split()
    return {
        "entry": entry.name,
        "torch": versions[0] if versions else "?",
        "numpy": versions[1] if len(versions) > 1 else "?",
        **counts(summary),
        "rc": proc.returncode,
        "minutes": round((time.monotonic() - start) / 60, 1),
        "log": str(log.relative_to(ROOT)),
    }


COLUMNS = ("entry", "torch", "numpy", "passed", "failed", "skipped", "errors", "rc", "minutes")


def table(rows: list[dict[str, object]]) -> str:
    head = "| " + " | ".join(COLUMNS) + " | log |\n|" + " --- |" * (len(COLUMNS) + 1) + "\n"
    body = "".join(
        "| " + " | ".join(str(r[c]) for c in COLUMNS) + f" | {r['log']} |\n" for r in rows
    )
    return head + body


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="entries to run (default: all)")
    ap.add_argument(
        "--oldest-torch",
        default=os.environ.get("OLDEST_TORCH") or torch_floor(),
        help="the oldest torch entry's version (default: pyproject.toml's lower bound)",
    )
    ap.add_argument(
        "--pytest-args",
        default=os.environ.get("PYTEST_ARGS", "-q"),
        help="arguments for pytest (default: the whole suite, -q)",
    )
    ap.add_argument(
        "--torch-index-url",
        default=os.environ.get("TORCH_INDEX_URL", ""),
        help="the index torch comes from (e.g. PyTorch's CPU wheels; default: pip's own)",
    )
    ap.add_argument("--results", type=Path, default=MATRIX_DIR / "results.md")
    ap.add_argument("--rebuild", action="store_true", help="build the venvs anew")
    ap.add_argument("--print-floors", action="store_true", help="print ci/floors.txt's text")
    args = ap.parse_args(argv)
    if args.print_floors:
        sys.stdout.write(floors_text())
        return 0
    known = {e.name: e for e in entries(args.oldest_torch)}
    unknown = [n for n in args.names if n not in known]
    if unknown:
        print(f"test_matrix: error: unknown entries {unknown}; known: {sorted(known)}")
        return 2
    chosen = [known[n] for n in args.names] if args.names else list(known.values())
    rows = []
    for entry in chosen:
        py = build(entry, args.rebuild, args.torch_index_url)
        print(f"[{entry.name}] pytest {args.pytest_args}", flush=True)
        rows.append(run_suite(entry, py, shlex.split(args.pytest_args)))
        print(table(rows[-1:]), flush=True)
    text = table(rows)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(text, encoding="utf-8")
    print(text + f"\n(written to {args.results})")
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
