"""A profiled run's end reads the user's lines for hand-written op chains without importing
libcst (0.35 s) where no line holds a word such a chain calls."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = """
import sys
from gpuopt.assemble.host_summary import _chains_in
print(_chains_in(sys.argv[1], "train.py", {1: None, 2: None}), "libcst" in sys.modules)
"""


def test_a_script_without_a_trigger_word_is_read_without_libcst(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("loss = F.cross_entropy(model(x), y)\nloss.backward()\n")
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(script)], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["[]", "False"], out.stdout + out.stderr


def test_a_trigger_word_does_load_the_matcher(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("y = torch.tanh(x)\nz = y * 2\n")
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(script)], capture_output=True, text=True, check=True
    )
    assert out.stdout.split()[-1] == "True", out.stdout + out.stderr
