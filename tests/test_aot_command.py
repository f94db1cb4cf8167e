"""``gpuopt schedule``: targets, inputs, output files, and one-line errors for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuopt.commands.schedule import schedule_command
from gpuopt.errors import GpuoptError

MODEL_SRC = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)
            self.b = nn.Linear(8, 8)
            self.c = nn.Linear(8, 8)

        def forward(self, x):
            return self.a(x) + self.b(x) * self.c(x)


    def pair():
        torch.manual_seed(0)
        return Branchy().eval(), (torch.randn(2, 8),)


    def model_only():
        torch.manual_seed(0)
        return Branchy().eval()


    def example_inputs():
        return (torch.randn(2, 8),)


    def other_inputs():
        return torch.randn(2, 8)


    def broken():
        raise RuntimeError("no weights here")


    def not_a_model():
        return 42


    class DataDependent(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x


    def data_dependent():
        return DataDependent(), (torch.randn(3),)


    def exits():
        import sys

        sys.exit(0)
    """
)


@pytest.fixture()
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "user_models.py"
    path.write_text(MODEL_SRC)
    return path


def run(
    target: str,
    tmp_path: Path,
    *,
    inputs: str | None = None,
    fmt: str = "text",
    profile: str = "h100",
) -> Path:
    out = tmp_path / "plan.json"
    schedule_command(target, inputs=inputs, device_profile=profile, out=out, fmt=fmt)
    return out


def test_file_target_with_pair_writes_plan_and_prints_summary(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(f"{model_file}:pair", tmp_path)
    text = capsys.readouterr().out
    doc = json.loads(out.read_text())
    plan = doc["plan"]
    assert {"nodes", "edges", "streams", "syncs", "num_streams", "order"} <= set(plan)
    assert plan["num_streams"] == 3  # three independent Linear branches
    assert f"streams        {plan['num_streams']}" in text
    assert f"syncs          {len(plan['syncs'])} = |E'|" in text
    assert "estimated (model: roofline" in text and "profile h100" in text
    assert doc["estimate"]["kind"] == "estimate"


def test_json_format_prints_the_written_document(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(f"{model_file}:pair", tmp_path, fmt="json", profile="v100")
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    assert printed["estimate"]["profile"] == "v100"


def test_inputs_from_module_function_and_from_option(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(f"{model_file}:model_only", tmp_path)
    assert json.loads(out.read_text())["plan"]["num_streams"] == 3
    out = run(f"{model_file}:model_only", tmp_path, inputs=f"{model_file}:other_inputs")
    assert json.loads(out.read_text())["plan"]["num_streams"] == 3


def test_module_target_and_default_output_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "mymodels_aot.py").write_text(MODEL_SRC)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    schedule_command("mymodels_aot:pair", inputs=None, device_profile="a100", out=None, fmt="text")
    assert (tmp_path / "pair.plan.json").exists()


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("no_colon_here", "must look like module:function"),
        ("missing_file.py:pair", "no such file"),
        ("definitely_not_a_module_xyz:pair", "no module named"),
        ("{file}:nope", "has no attribute 'nope'"),
        ("{file}:broken", "raised RuntimeError: no weights here"),
        ("{file}:not_a_model", "expected an nn.Module"),
        ("{file}:data_dependent", "cannot capture"),
        ("{file}:exits", "factory '{file}:exits' called sys.exit(0); it must return the model"),
    ],
)
def test_bad_targets_raise_one_line_errors(
    model_file: Path, tmp_path: Path, target: str, message: str
) -> None:
    with pytest.raises(GpuoptError) as info:
        run(target.format(file=model_file), tmp_path)
    assert message.format(file=model_file) in str(info.value)
    assert "\n" not in str(info.value)


def test_a_failed_export_prints_nothing_but_our_one_line(
    model_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """torch.export prints the partial graph of a failed export to stderr; held back."""
    with pytest.raises(GpuoptError, match="cannot capture"):
        run(f"{model_file}:data_dependent", tmp_path)
    assert capsys.readouterr().err == ""


def test_a_module_that_exits_on_import_is_one_line(tmp_path: Path) -> None:
    script = tmp_path / "train_script.py"
    script.write_text("import sys\n\ndef model():\n    pass\n\nsys.exit(4)\n")
    with pytest.raises(GpuoptError, match="importing .* called sys.exit\\(4\\).*__main__"):
        run(f"{script}:model", tmp_path)


def test_missing_inputs_and_unknown_profile(tmp_path: Path) -> None:
    src = "import torch\n\ndef m():\n    return torch.nn.Linear(2, 2)\n"
    path = tmp_path / "no_inputs.py"
    path.write_text(src)
    with pytest.raises(GpuoptError, match="no example inputs"):
        run(f"{path}:m", tmp_path)
    with pytest.raises(GpuoptError, match="unknown device profile 'mi300'"):
        run(f"{path}:m", tmp_path, profile="mi300")
    with pytest.raises(GpuoptError, match="text or json"):
        run(f"{path}:m", tmp_path, fmt="html")


def test_cli_exit_codes(model_file: Path, tmp_path: Path) -> None:
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuopt",
            "schedule",
            f"{model_file}:pair",
            "-o",
            str(tmp_path / "p.json"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert ok.returncode == 0, ok.stderr
    assert "estimated (model:" in ok.stdout
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuopt",
            "schedule",
            f"{model_file}:nope",
            "-o",
            str(tmp_path / "q.json"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert bad.returncode == 2
    assert bad.stderr.startswith("gpuopt: error: ") and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
