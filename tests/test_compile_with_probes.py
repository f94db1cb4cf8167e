"""torch.compile under gpuopt's other probes: the memory probe's hooks stay out of the script's
compiled code (where they get in, Dynamo compiles gpuopt's own ``__torch_function__`` and
``on_function``: graph breaks with no user line, a recompile of every frame when the recording
ends, and, in the tracked step, the compiled code marked to run eagerly for the rest of the
run), and the GPU check's report of a break or recompile with no user line (docs/compile.md)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import ROOT, load_benchmark

from gpuopt import torch_compat
from gpuopt.compile.events import FrameRecord
from gpuopt.memory.capture import StepRecorder
from gpuopt.memory.cuda import RecordedAllocator
from gpuopt.probes import steps as steps_mod
from gpuopt.probes.compile import CompileProbe, own_frames
from gpuopt.probes.memory import MemoryProbe
from gpuopt.probes.protocol import RunContext


def _mode_stack() -> list[Any]:
    from torch.overrides import _get_current_function_mode_stack

    return list(_get_current_function_mode_stack())  # type: ignore[no-untyped-call]


class _Seen(torch.nn.Module):
    """A module that notes the torch-function modes on the stack while its forward runs."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.stacks: list[list[Any]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.stacks.append(_mode_stack())
        return torch.relu(self.lin(x))


def test_the_recorders_mode_is_off_the_stack_inside_a_module_and_on_between_them() -> None:
    rec = StepRecorder()
    model = _Seen()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec.start()
    try:
        between = _mode_stack()
        loss = torch.nn.functional.mse_loss(model(torch.randn(4, 8)), torch.zeros(4, 8))
        loss.backward()
        opt.step()
        rec.step_ended()
    finally:
        rec.stop()
    assert len(between) == 1  # the recorder's, between module calls
    assert model.stacks == [[]]  # none inside the module: a compiled forward never meets it
    names = [rec.step.entries[i].name for i in rec.step.needed()]
    # the torch calls between module calls are still recorded
    assert names == ["_Seen", "zeros", "mse_loss", "backward", "SGD"]
    assert not _mode_stack()


def test_a_mode_the_script_pushed_above_the_recorders_is_left_alone() -> None:
    from torch.overrides import TorchFunctionMode

    class Users(TorchFunctionMode):
        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            return func(*args, **(kwargs or {}))

    rec = StepRecorder()
    model = _Seen()
    rec.start()
    try:
        with Users() as users:
            model(torch.randn(4, 8))
        model(torch.randn(4, 8))
    finally:
        rec.stop()
    assert len(model.stacks[0]) == 2 and model.stacks[0][-1] is users  # not taken off
    assert model.stacks[1] == []
    assert not _mode_stack()


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU())
        self.out = torch.nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(x))


@pytest.fixture
def dynamo() -> Iterator[None]:
    """Dynamo reset around the test, and gpuopt's "the script compiles" state put back after
    it: the frames compiled here are no later test's script's (a recorder made after them would
    leave its function-level mode off and read an ``if t:`` as ``item``)."""
    import torch._dynamo

    from gpuopt.probes import compile as c

    called = c.COMPILE_CALLED[0]
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    c.COMPILE_CALLED[0] = called
    c.FRAMES_AT_START[0] = c.frames_compiled()


def test_a_compiled_model_keeps_running_compiled_through_the_memory_probes_steps(
    tmp_path: Path, dynamo: None
) -> None:
    """The GPU side of the memory probe (a recorded allocator): step 0 recorded as a program,
    step 1 under the category tracker. The compiled model is compiled once, in step 0, and its
    graph runs in every step: no recompile when the recording ends or the tracker's hooks go, no
    code marked to run eagerly. A compiled ``nn.Sequential`` (torch's own code: Dynamo before
    2.14 compiles none of it) stays uncompiled: its layers are not called through gpuopt's
    wrapper; torch 2.14 compiles it once, in step 0, as a run without gpuopt does."""
    compiled: list[int] = []  # the step of each compile
    runs: list[int] = []  # the step of each run of a compiled graph
    step = [0]

    def backend(gm: torch.fx.GraphModule, inputs: list[Any]) -> Any:
        compiled.append(step[0])

        def run(*args: Any) -> Any:
            runs.append(step[0])
            return gm.forward(*args)

        return run

    probe = MemoryProbe(None, RecordedAllocator())
    probe.start(RunContext(script="t.py", user_roots=[Path(__file__).parent], out_dir=tmp_path))
    clock = steps_mod.StepClock(clock=time.perf_counter)
    clock.listeners.append(probe.on_step)
    steps_mod.install(clock)
    try:
        torch.manual_seed(0)
        model = _Net()
        model.compile(backend=backend)
        head = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        head.compile(backend=backend)
        opt = torch.optim.SGD([*model.parameters(), *head.parameters()], lr=0.01)
        for i in range(5):
            step[0] = i
            x = torch.randn(8, 16)
            loss = model(x).mean() + head(x).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        steps_mod.uninstall()
        probe.stop()
    m = probe.result()
    assert m is not None and m.measured is not None and m.measured.tracked_step == 1
    # torch 2.14's Dynamo compiles the Sequential's Module.compile() too: one more graph a step
    graphs = 2 if torch_compat.module_compile_traces_torch_forward() else 1
    assert compiled == [0] * graphs
    assert runs == [i for i in range(5) for _ in range(graphs)]
    assert "not named by module: the script compiles" in (m.note or "")


def test_torchs_own_module_compiled_in_place_is_noted_as_compiling_nothing_where_it_does(
    tmp_path: Path, dynamo: None
) -> None:
    """``Linear.compile()`` is noted as compiling nothing where Dynamo skips torch's code (before
    torch 2.14) and not where it compiles it; ``Module.compile()`` of the script's own never."""
    probe = CompileProbe()
    probe.start(RunContext(script="t.py", user_roots=[Path(__file__).parent], out_dir=tmp_path))
    try:
        torch.nn.Linear(2, 2).compile(backend="eager")
        _Net().compile(backend="eager")
    finally:
        probe.stop()
    lin, net = probe.result().calls
    assert (lin.target, net.target) == ("Linear", "_Net")
    assert lin.module_method and net.module_method
    assert lin.library_code and not net.library_code
    assert lin.compiles_nothing is not torch_compat.module_compile_traces_torch_forward()
    assert not net.compiles_nothing


def test_frames_compiled_in_gpuopts_own_code_are_named() -> None:
    def record(filename: str, name: str) -> FrameRecord:
        return FrameRecord("0/0", name, filename, 1, None, False, 0.0, 0.1, 0)

    probe_file = str(ROOT / "gpuopt" / "memory" / "capture.py")
    frames = [record("/x/train.py", "forward"), record(probe_file, "on_function")]
    assert own_frames(frames) == ["capture.py:on_function"]
    assert own_frames(frames[:1]) == []


def test_the_gpu_checks_report_says_a_site_unknown_and_never_crashes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    check = load_benchmark("gpu/check_compile")
    planted = {"BREAK-PRINT": 16, "BREAK-ITEM": 17, "BREAK-IF": 18}
    doc = {
        "compile": {
            "graph_breaks": [
                {"site": "/tmp/t/compiled_train.py:16", "kind": "print", "count": 2},
                {"site": None, "kind": "item", "count": 2, "function": "__torch_function__"},
                {"site": None},
            ],
            "recompiles": [{"site": None, "guard": "g", "count": 1}, {}],
            "functions": [{"name": "forward"}, {}],
        },
        "trace": {"ranks": [{"idle_causes": {"idle_us": None, "by_cause": {"sync": None}}}, {}]},
        "findings": [{"id": "graph-break"}, {}],
    }
    check._report(doc, "aot_eager", 1.0, planted)
    check._report({}, "inductor", 1.0, planted)
    out = capsys.readouterr().out
    assert "break at line 16: print (2x)" in out
    assert "break at site unknown (in `__torch_function__`, no frame of the script" in out
    assert "planted breaks found at their lines: 1 of 3; missing" in out
    assert "recompile at site unknown (no frame of the script on Dynamo's stack): `g`" in out
    assert "planted breaks found at their lines: 0 of 3" in out
