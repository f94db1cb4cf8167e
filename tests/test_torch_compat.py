"""gpuopt.torch_compat: every private torch name gpuopt reaches resolves on the installed torch,
and one that is missing degrades to a labelled "not available on torch X.Y" warning in the
profile's document and in every rendering of it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuopt import torch_compat
from gpuopt.commands.profile import run_profile
from gpuopt.model.document import load_profile
from gpuopt.report import get_renderer
from gpuopt.runner.options import ProfileOptions

METRICS = "dynamo.compilation_metrics"


@pytest.fixture(autouse=True)
def _fresh_lookups() -> Iterator[None]:
    torch_compat.reset()
    yield
    torch_compat.reset()


def _simulate_missing(monkeypatch: pytest.MonkeyPatch, key: str) -> list[str]:
    """The compat layer's lookup of ``key`` fails as on a torch without the name; the lookups
    made are listed (each name is looked up once)."""
    real = torch_compat._lookup
    made: list[str] = []

    def lookup(e: torch_compat.Entry) -> Any:
        made.append(e.name)
        if e is torch_compat.ENTRIES[key]:
            raise AttributeError(e.attr)
        return real(e)

    monkeypatch.setattr(torch_compat, "_lookup", lookup)
    return made


def test_every_private_name_resolves_on_the_installed_torch() -> None:
    """The list of what this torch lacks (printed with -s); a name this torch should have
    (the entry's ``since``) that is missing fails: gpuopt's feature is broken here."""
    found = torch_compat.check_all()
    missing = {k: v for k, v in found.items() if v is not None}
    print(f"torch {torch_compat.torch_version()}: missing {missing or 'nothing'}")
    broken = {k: v for k, v in missing.items() if torch_compat.expected(k)}
    assert not broken
    assert set(found) <= set(torch_compat.ENTRIES)
    assert len(found) >= len(torch_compat.ENTRIES) - 1  # at most the CUDA build's one skipped


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_the_names_read_off_objects_are_there_too() -> None:
    import torch

    model = torch.nn.Linear(2, 2)
    assert torch_compat.compiled_original(torch.compile(model)) is model
    assert torch_compat.compiled_original(model) is None
    assert torch_compat.op_name(torch.ops.aten.add.Tensor) == "add"
    assert torch_compat.op_and_overload(torch.ops.aten.add.Tensor) == ("add", "Tensor")
    t = torch.zeros(2)
    before = torch_compat.tensor_version(t)
    t.add_(1)
    assert torch_compat.tensor_version(t) == before + 1
    assert torch_compat.current_graph_task_id() == -1  # outside any backward
    assert torch_compat.current_dispatch_mode() is None
    assert torch_compat.DYNAMO_MODULE in sys.modules  # torch.compile imported Dynamo
    assert torch_compat.dynamo_frames_compiled() >= 0
    assert torch.Tensor.backward.__module__ == torch_compat.TENSOR_BACKWARD_MODULE


def test_importing_the_compat_layer_does_not_import_torch() -> None:
    code = "import sys, gpuopt.torch_compat; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_missing_name_is_a_labelled_outcome_looked_up_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = _simulate_missing(monkeypatch, METRICS)
    version = torch_compat.torch_version()
    expected = (
        f"compile probe not available on torch {version}: "
        "torch._dynamo.utils._compilation_metrics missing (compiled frames, graph breaks' "
        "frames and recompiles not recorded)"
    )
    for _ in range(2):
        with pytest.raises(torch_compat.Unavailable) as ei:
            torch_compat.dynamo_utils()
        assert str(ei.value) == expected
    assert not torch_compat.available(METRICS)
    assert made == ["torch._dynamo.utils._compilation_metrics"]  # once, then remembered
    assert torch_compat.take_unavailable() == [expected]
    assert torch_compat.take_unavailable() == []  # taken
    assert torch_compat.available("pytree")  # the others still resolve


STEPS = """\
import torch
import torch._dynamo  # the compile probe attaches to Dynamo once it is imported

model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(4):
    opt.zero_grad()
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
"""


def test_a_probe_that_cannot_work_on_this_torch_says_so_in_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The compile probe without Dynamo's record list: the run goes on, and the document's
    warnings, the terminal report and every rendering say what is not recorded and why."""
    _simulate_missing(monkeypatch, METRICS)
    script = tmp_path / "train.py"
    script.write_text(STEPS)
    out = tmp_path / "run"
    opts = ProfileOptions(script=str(script), module=None, args=[], out=out, window=0)
    with pytest.raises(SystemExit) as ei:
        run_profile(opts)
    assert ei.value.code == 0
    printed = capsys.readouterr().out
    want = (
        f"compile probe not available on torch {torch_compat.torch_version()}: "
        "torch._dynamo.utils._compilation_metrics missing"
    )
    profile = load_profile(out)
    assert profile.status == "ok" and profile.steps.count == 4
    (warning,) = [w for w in profile.warnings if "not available on torch" in w]
    assert warning.startswith(want) and "recompiles not recorded" in warning
    assert want in " ".join(printed.split())  # the terminal report, whatever its wrapping
    for name in ("md", "html", "json"):
        rendered = get_renderer(name).render(profile).replace("\\_", "_")  # Markdown's escapes
        assert want in rendered, name


def test_a_run_on_a_torch_with_every_name_has_no_such_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text(STEPS)
    out = tmp_path / "run"
    opts = ProfileOptions(script=str(script), module=None, args=[], out=out, window=0)
    with pytest.raises(SystemExit):
        run_profile(opts)
    capsys.readouterr()
    assert not [w for w in load_profile(out).warnings if "not available on torch" in w]


class _Translator210:
    """Dynamo's graph-break log call as torch 2.10 has it (keyword ``user_stack``, no exception)."""

    def log_graph_break(self, code_options: Any, reason: str = "", user_stack: Any = None) -> str:
        return f"logged {reason}"


class _Translator211:
    """As torch 2.11 and later have it: the exception of the break is passed."""

    def log_graph_break(self, code_options: Any, reason: str, exc: Any) -> str:
        return f"logged {reason}"


@pytest.mark.parametrize(
    ("translator", "call", "breaks"),
    [
        (_Translator211, lambda t: t.log_graph_break({}, "why", RuntimeError("break")), 1),
        (_Translator210, lambda t: t.log_graph_break({}, reason="why", user_stack=[]), 0),
    ],
    ids=["2.11", "2.10"],
)
def test_the_graph_break_hook_passes_every_form_of_the_call_through(
    monkeypatch: pytest.MonkeyPatch, translator: type, call: Any, breaks: int
) -> None:
    """A graph break is recorded where the call carries its exception; an older form of the call
    reaches Dynamo unchanged rather than failing the user's compile."""
    from gpuopt.probes.compile import CompileProbe

    monkeypatch.setattr(torch_compat, "graph_break_translator", lambda: translator)
    probe = CompileProbe()
    seen: list[Any] = []
    monkeypatch.setattr(probe, "_on_break", lambda tr, exc: seen.append(exc))
    dynamos = translator.log_graph_break
    probe._attach()
    try:
        assert call(translator()) == "logged why"
    finally:
        probe._detach()
    assert len(seen) == breaks
    assert translator.log_graph_break is dynamos  # Dynamo's own again once the probe stops
