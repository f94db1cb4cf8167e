"""What a profiled run imports: gpuopt's modules cost every profiled script their import before
its first line (docs/bench-profile.md), so a single CPU process imports none of the probes it
cannot have, and no module on that path defines a dataclass (its methods are compiled at import:
~0.4 ms a class here, 30 times a msgspec Struct's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# probes of a GPU, of torchrun's ranks or of an option this run does not give
NOT_ON_A_CPU_RUN = (
    "gpuopt.probes.collectives",
    "gpuopt.probes.collective_timing",
    "gpuopt.probes.memory",
    "gpuopt.memory.capture",
    "gpuopt.memory.cuda",
    "gpuopt.probes.training_record",
    "gpuopt.probes.profiler_window",
    "gpuopt.compile.regions",
)

CODE = """
import dataclasses, json, sys
import gpuopt.commands.entry as e
sys.argv = ["gpuopt", "profile", "--quiet", "--force", "-o", sys.argv[1], sys.argv[2]]
try:
    e.main()
except SystemExit as exc:
    code = exc.code
gpuopt = {n: m for n, m in list(sys.modules.items()) if n.startswith("gpuopt")}
dataclasses_here = sorted(
    f"{n}.{v.__name__}"
    for n, m in gpuopt.items()
    for v in list(vars(m).values())
    if isinstance(v, type) and v.__module__ == n and dataclasses.is_dataclass(v)
)
print(json.dumps({"code": code, "modules": sorted(gpuopt), "dataclasses": dataclasses_here}))
"""


def _profiled(tmp_path: Path) -> dict[str, object]:
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Linear(4, 2)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(8):\n"
        "    opt.zero_grad()\n"
        "    model(torch.ones(3, 4)).sum().backward()\n"
        "    opt.step()\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "GPUOPT_DEBUG")}
    env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU run on any machine: no GPU probe is wanted
    r = subprocess.run(
        [sys.executable, "-c", CODE, str(tmp_path / "run"), str(script)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    out: dict[str, object] = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["code"] in (0, None), r.stderr
    return out


def test_a_cpu_run_imports_no_probe_it_cannot_have(tmp_path: Path) -> None:
    out = _profiled(tmp_path)
    modules = out["modules"]
    assert isinstance(modules, list) and "gpuopt.runner.session" in modules
    assert [m for m in NOT_ON_A_CPU_RUN if m in modules] == []
    assert out["dataclasses"] == []
