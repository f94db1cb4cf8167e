"""What `gpuopt profile` runs per op and per step outside its windows, counted (not timed: a
count does not change with the machine's load). No gpuopt code may run per tensor op outside
the recorder's and the profiler's windows: the calls into gpuopt's code per step are the same
whatever the step's op count, and few (the step clock, the DataLoader wait and the batch
shapes)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import SCRIPTS, run_gpuopt

# Python calls into gpuopt's code plus the C calls it makes, per step: 65, and 74 with the memory
# probe (the step clock with every optimizer's marks, the DataLoader wait and its loader role,
# the batch shapes, each probe's on_step); a new per-step hook raises it on purpose.
MAX_CALLS_PER_STEP = 76


def _counted(tmp_path: Path, classes: int, *extra: str) -> dict[str, float]:
    out = tmp_path / f"calls-{classes}.json"
    r = run_gpuopt(
        "profile",
        "--quiet",
        *extra,
        "-o",
        str(tmp_path / f"run-{classes}"),
        str(SCRIPTS / "gpuopt_calls.py"),
        str(out),
        "--classes",
        str(classes),
    )
    assert r.returncode == 0, r.stderr
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def test_no_gpuopt_code_runs_per_op_outside_the_windows(tmp_path: Path) -> None:
    few, many = _counted(tmp_path, 5), _counted(tmp_path, 40)
    assert many["ops_per_step"] > few["ops_per_step"] + 100  # the steps differ by 100+ ops
    assert few["calls_per_step"] == many["calls_per_step"]  # ... and gpuopt's calls do not
    assert 0 < few["calls_per_step"] <= MAX_CALLS_PER_STEP


def test_the_memory_probe_leaves_nothing_per_op_either(tmp_path: Path) -> None:
    """With the memory probe on (``--memory-for``; on a GPU it always is) its program recorder's
    function mode must leave the stack after the first step even though the recorder's warm-up
    window has pushed its own above it by then: it stayed, inert, for the whole run, a Python
    call per torch call (the H200's 1.46x profile overhead on a 3 ms step,
    docs/gpu-validation.md)."""
    few = _counted(tmp_path, 5, "--memory-for", "h100")
    many = _counted(tmp_path, 40, "--memory-for", "h100")
    assert many["ops_per_step"] > few["ops_per_step"] + 100
    assert few["calls_per_step"] == many["calls_per_step"]
    assert 0 < few["calls_per_step"] <= MAX_CALLS_PER_STEP
