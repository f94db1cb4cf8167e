"""Make the gpuopt under test look like an installed one before timing it.

``pip install gpuopt`` compiles every module to bytecode at install time, so a user's first
command already starts from ``.pyc`` files. The project's editable checkout has none where
``PYTHONDONTWRITEBYTECODE`` is set (it is on this project's machines): every run would then
compile ~100 modules again, 0.03-0.1 s that no user pays. The benchmarks compile first; the
bytecode lands in ``gpuopt/**/__pycache__`` (git-ignored) and is ignored once a source changes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def compile_gpuopt(python: str = sys.executable) -> None:
    subprocess.run(
        [python, "-m", "compileall", "-q", str(ROOT / "gpuopt")], check=True, stdout=subprocess.DEVNULL, cwd=ROOT
    )
