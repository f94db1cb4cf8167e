"""Whether a run compiles decides whether the recorder keeps its torch-function mode. Dynamo being
imported is not enough: torch's own Optimizer.__init__ imports it (so does MemTracker), and a run
with an optimizer would lose the recorder's Python-level view (every sync's API, its calls)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import ROOT


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_an_optimizer_imports_dynamo_but_the_script_does_not_compile() -> None:
    got = _run(
        """
        import sys, torch
        from gpuopt.probes import compile as c
        torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)
        print("torch._dynamo" in sys.modules, c.script_compiles())
        """
    )
    assert got == "True False"


def test_a_compiled_frame_or_a_torch_compile_call_counts() -> None:
    got = _run(
        """
        import torch
        from gpuopt.probes import compile as c
        f = torch.compile(torch.nn.Linear(2, 2), backend="eager")
        after_call = c.script_compiles()  # not wrapped here: no probe noted the call
        f(torch.randn(3, 2))
        print(after_call, c.script_compiles())
        """
    )
    assert got == "False True"


def testframes_compiled_before_the_probe_started_do_not_count() -> None:
    got = _run(
        """
        import torch
        from gpuopt.probes import compile as c
        torch.compile(torch.nn.Linear(2, 2), backend="eager")(torch.randn(3, 2))
        c.FRAMES_AT_START[0] = c.frames_compiled()
        print(c.script_compiles())
        c.COMPILE_CALLED[0] = True
        print(c.script_compiles())
        """
    )
    assert got.split() == ["False", "True"]
