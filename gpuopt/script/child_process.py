"""An analysis of the user's script in a child process (the DataLoader sweep, the AoT check):
``python -m MODULE SPEC.json`` with the same interpreter and working directory; it writes its
result to ``out_file`` and exits 0, or says why on its last line of stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from gpuopt import debug
from gpuopt.debug import PREFIX, logger
from gpuopt.errors import GpuoptError, say
from gpuopt.script import interrupts

log = logger(__name__)


def run_child(
    module: str, spec: dict[str, Any], out_file: Path, timeout_s: float, what: str
) -> Any:
    """Run ``module``'s child side on ``spec``; its result (the JSON it wrote), or a one-line
    :class:`GpuoptError` naming ``what`` failed and why."""
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.unlink(missing_ok=True)
    spec_file = out_file.with_suffix(".spec.json")
    spec_file.write_text(json.dumps({**spec, "out": str(out_file)}))
    log.debug("%s: python -m %s %s", what, module, spec_file)
    proc = interrupts.run(
        [sys.executable, "-m", module, str(spec_file)],
        timeout_s,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if proc is None:
        raise GpuoptError(f"{what} took more than {timeout_s:.0f} s")
    lines = proc.stderr.strip().splitlines()
    for line in lines:  # the child's debug lines (GPUOPT_DEBUG), passed on as they came
        if line.startswith(PREFIX):
            say(line)
    if proc.returncode != 0 or not out_file.exists():
        lines = [ln for ln in lines if not ln.startswith(PREFIX)]
        tail = lines[-1:] or [f"exit code {proc.returncode}"]
        raise GpuoptError(f"{what} failed: {tail[0]}")
    return json.loads(out_file.read_text())


def child_main(argv: list[str], child: Callable[[dict[str, Any]], int]) -> NoReturn:
    """The child side: run ``child`` on the spec, then leave at once — the half-run script's
    atexit handlers never run (it never trained)."""
    debug.isolate()
    debug.from_env()
    code = child(json.loads(Path(argv[0]).read_text()))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
