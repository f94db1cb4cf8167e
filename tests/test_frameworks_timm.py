"""timm under gpuopt. torchvision's wheels are built for a CUDA torch and fail to import beside
the project venv's CPU torch, so the runs happen in a venv of their own, ``.venv-vision``
(torch 2.14.1's CUDA build, on the CPU, with torchvision 0.29.1 and timm 1.0.28: ``make
.venv-vision/.installed``, which .ci/run calls): ``gpuopt profile`` in a process of that venv's
python, on a script built from timm's library (benchmarks/frameworks/timm_train.py) and on
timm's own train.py; both skip without the venv. And, with no timm at all, what makes a run
timm's train.py: the factories it imported and the flags its command line takes."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, marker_site

from gpuopt.frameworks import detect, timm
from gpuopt.model.records import Framework
from gpuopt.probes.framework import FrameworkProbe
from gpuopt.probes.protocol import RunContext
from gpuopt.units import fmt_bytes

VISION = ROOT / ".venv-vision"
SCRIPT = ROOT / "benchmarks" / "frameworks" / "timm_train.py"
DATA = ROOT / "benchmarks" / "frameworks" / "timm_data.py"


def _vision(*args: str) -> subprocess.CompletedProcess[str]:
    """``.venv-vision/bin/python ARGS`` from the repository's root (``-m gpuopt`` runs this
    checkout's gpuopt); the test is skipped where the venv was not built."""
    if not (VISION / ".installed").exists():
        pytest.skip(
            "no .venv-vision: `make .venv-vision/.installed` builds it (torch 2.14.1's CUDA build "
            "with torchvision 0.29.1 and timm, about 5.5 GB; .ci/run does)"
        )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [str(VISION / "bin" / "python"), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _images(tmp_path: Path, per_class: int) -> Path:
    r = _vision(str(DATA), str(tmp_path / "data"), str(per_class))
    assert r.returncode == 0, r.stderr[-2000:]
    return tmp_path / "data"


def _one_per_sample_figure(doc: dict[str, Any], report: str) -> None:
    """The memory prediction states one bytes-a-sample figure: the one its limit names, the only
    one the text report prints, and the one the largest batch was priced with."""
    predicted = doc["memory"]["predicted"]
    per = predicted["bytes_per_sample"]
    assert f"{fmt_bytes(per)} a sample" in predicted["limit"]
    text = " ".join(report.split())  # the report's lines wrap where the terminal is narrow
    assert set(re.findall(r"(\d[\d.,]* [KMGT]?i?B) a sample", text)) == {fmt_bytes(per)}
    capacity = doc["memory"]["capacity_bytes"]
    assert predicted["fixed_bytes"] + per * predicted["max_batch_size"] <= 0.9 * capacity * 1.01


def test_a_script_built_from_timms_library_is_a_plain_loop_read_right(tmp_path: Path) -> None:
    """timm's model, loader, optimizer, scheduler and loss in a loop of the script's own, at
    batch 4 on 24 training images for 2 epochs: 12 steps, the evaluation loader's batches apart,
    no framework (its command line has none of train.py's flags, which gpuopt's timm fixes
    name), the one read of the script's own line counted and the reads torchvision's
    transforms make on CPU tensors while the batch is built (62 a batch of 4) not."""
    data = _images(tmp_path, per_class=12)
    out = tmp_path / "run"
    args = ["-m", "gpuopt", "profile", "--memory-for", "h100", "-o", str(out), str(SCRIPT)]
    r = _vision(*args, "--data-dir", str(data), "--epochs", "2", "-b", "4")
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((out / "profile.json").read_text())
    assert doc["steps"]["count"] == 12 and doc["steps"]["marked_by"] == ["optimizer.step"]
    loaders = {d["site"]: (d["role"], d["batches"], d["built_in"]) for d in doc["dataloaders"]}
    assert loaders == {
        marker_site(SCRIPT, "fetch"): ("train", 12, ["create_loader"]),
        marker_site(SCRIPT, "eval"): ("eval", 4, ["create_loader"]),
    }
    assert doc["framework"] is None
    assert not [f for f in doc["findings"] if "command line" in f["fix"]]
    assert [s["site"] for s in doc["syncs"]] == [marker_site(SCRIPT, "log")]
    assert not [s for s in doc["syncs"] if s.get("library_site")]
    assert doc["memory"]["predicted"]["batch_size"] == 4
    _one_per_sample_figure(doc, r.stdout)


def test_timm_train_py_run_has_phases_and_one_per_sample_figure(tmp_path: Path) -> None:
    """timm v1.0.28's own train.py (sources.toml's ``timm``, set up from its snapshot)."""
    from conftest import corpus_source

    train = corpus_source("timm") / "train.py"
    data = _images(tmp_path, per_class=8)
    out = tmp_path / "run"
    flags = ["--data-dir", str(data), "--model", "resnet18", "--num-classes", "2"]
    flags += ["--img-size", "32", "-b", "4", "--epochs", "1", "--workers", "1"]
    flags += ["--device", "cpu", "--output", str(tmp_path / "out")]
    args = ["-m", "gpuopt", "profile", "--memory-for", "h100", "-o", str(out), str(train)]
    r = _vision(*args, *flags)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((out / "profile.json").read_text())
    assert doc["steps"]["count"] == 4
    fw = doc["framework"]
    assert fw["name"] == "timm" and fw["version"] == "1.0.28"
    assert fw["phases"] == [{"name": "train", "steps": 4}, {"name": "validation", "steps": 1}]
    assert doc["memory"]["predicted"]["batch_size"] == 4
    _one_per_sample_figure(doc, r.stdout)


def _script(*flags: str) -> types.ModuleType:
    """A ``__main__`` module whose argument parser takes ``flags`` (in a group, as train.py's)."""
    parser = argparse.ArgumentParser()
    group = parser.add_argument_group("options")
    for flag in flags:
        group.add_argument(flag)
    main = types.ModuleType("__main__")
    main.parser = parser  # type: ignore[attr-defined]
    return main


class _Timm:
    __version__ = "1.0.28"


def test_timm_is_train_pys_factories_and_flags_not_its_imports_alone() -> None:
    factories = {"timm": _Timm(), **dict.fromkeys(timm.SCRIPT_PACKAGES, _Timm())}
    train_py = _script(*sorted(timm.SCRIPT_FLAGS), "--epochs")
    found = timm.recognise({**factories, "__main__": train_py})
    assert found == Framework(name="timm", version="1.0.28")
    assert timm.recognise({"timm": _Timm(), "__main__": train_py}) is None  # a model alone
    own = _script("--data-dir", "--epochs", "--batch-size")  # timm's factories, its own loop
    assert timm.recognise({**factories, "__main__": own}) is None
    assert timm.recognise({**factories, "__main__": _script("--workers")}) is None
    assert timm.recognise(factories) is None


def test_the_probe_hands_recognise_the_scripts_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run puts gpuopt's own ``__main__`` back before the probe's result: the module a spec's
    ``recognise`` reads as ``__main__`` is the script's, as it was at a step."""
    seen: list[Any] = []
    monkeypatch.setattr(detect, "REGISTRY", ("gpuopt.frameworks.timm",))
    monkeypatch.setattr(timm, "recognise", lambda modules: seen.append(modules["__main__"]))
    probe = FrameworkProbe()
    probe.start(RunContext(script="train.py", user_roots=[tmp_path], out_dir=tmp_path))
    script, ours = types.ModuleType("__main__"), sys.modules["__main__"]
    sys.modules["__main__"] = script
    try:
        probe.on_step(0, 0.0)
    finally:
        sys.modules["__main__"] = ours
    assert probe.result() is None
    assert seen == [script]
