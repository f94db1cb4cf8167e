"""Make the gpuopt under test look like an installed one before timing it.

A user runs ``gpuopt`` from a ``pip install``: a non-editable install whose modules were compiled
to bytecode at install time. The project's checkout differs in two ways that only cost time:
it is an *editable* install (``site`` imports setuptools' editable finder at every start, 15-20 ms
here), and where ``PYTHONDONTWRITEBYTECODE`` is set (it is on this project's machines) every run
compiles ~100 modules again (0.03-0.1 s). :func:`user_venv` therefore builds a wheel of the
checkout and installs it into ``benchmarks/.work/user-venv`` (git-ignored), a venv whose other
packages come from the project's venv through a ``.pth`` line; benchmarks run its ``gpuopt``
console script, and its ``python`` for the plain side of a comparison, so both pay the same
interpreter start-up. :func:`compile_gpuopt` is for benchmarks that time gpuopt in-process.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
USER_VENV = ROOT / "benchmarks" / ".work" / "user-venv"


def compile_gpuopt(python: str = sys.executable) -> None:
    subprocess.run(
        [python, "-m", "compileall", "-q", str(ROOT / "gpuopt")],
        check=True,
        stdout=subprocess.DEVNULL,
        cwd=ROOT,
    )


def user_venv(src_root: Path = ROOT, venv: Path = USER_VENV) -> Path:
    """(Re)install ``src_root`` (the checkout, or an exported older revision) as a wheel into
    ``venv``; returns the venv's bin folder.

    Run with the project's venv Python (its packages are the ones the user venv borrows)."""
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "_bench_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    with tempfile.TemporaryDirectory() as tmp:
        # Build from a copy: setuptools writes build/ and *.egg-info next to the sources.
        src = Path(tmp) / "src"
        shutil.copytree(
            src_root,
            src,
            ignore=shutil.ignore_patterns(
                ".venv", ".git", "benchmarks", "__pycache__", "*.egg-info", "build"
            ),
        )
        pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
        subprocess.run(
            [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", tmp, str(src)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        wheel = next(Path(tmp).glob("gpuopt-*.whl"))
        subprocess.run(
            [*pip, "--python", str(py), "install", "--no-deps", "--force-reinstall", str(wheel)],
            check=True,
        )
    return py.parent


def revision_venv(rev: str, reuse: bool = False) -> Path:
    """A user-like install of git revision ``rev`` (``git archive``, no worktree), for timing a
    change side by side with what it changed; returns the venv's bin folder (``reuse``: the one
    built before, as it is, where there is one)."""
    sha = subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    built = ROOT / "benchmarks" / ".work" / f"user-venv-{sha}"
    if reuse and (built / "bin" / "gpuopt").exists():
        return built / "bin"
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", sha], cwd=ROOT, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        return user_venv(Path(tmp), built)


if __name__ == "__main__":
    print(user_venv())
