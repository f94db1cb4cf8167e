"""benchmarks/bench_step_paired.py: one `gpuopt profile` run whose per-step work is switched off
every other step, each half's steps timed by the script's optimizer steps."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import load_benchmark

one_run = load_benchmark("bench_step_paired").one_run  # type: ignore[attr-defined]

LOOP = """import argparse
import torch
from torch.utils.data import DataLoader, TensorDataset
ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int)
n = ap.parse_args().steps
loader = DataLoader(TensorDataset(torch.rand(n * 4, 3), torch.rand(n * 4, 1)), batch_size=4)
model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_the_steps_are_split_into_halves_with_gpuopt_on_and_off(tmp_path: Path) -> None:
    """60 optimizer steps, from step 10: the 49 intervals between the 11th and the 60th
    alternate, 24 with gpuopt's per-step work on and 25 off; the run's own key is read."""
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    gpuopt = str(Path(sys.executable).parent / "gpuopt")
    got = one_run(gpuopt, script, 60, 10, None)
    assert got["pairs"] == 24
    assert got["on_ms"] > 0 and got["off_ms"] > 0
    assert got["key_per_step_us"] > 0  # gpuopt's own count, over the steps with it on
