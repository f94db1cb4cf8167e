"""`make gpu-check`: every GPU-only path of gpuopt, run on a machine with a CUDA GPU, and what it
measured appended to docs/gpu-validation.md. Without a CUDA device it says so and exits 0.

Checks: NVML sampling while the GPU works; `gpuopt profile` of a CUDA script (the profiler
window's Kineto trace, the per-rank `gpu` section); the AoT CUDA executor's tests; `gpuopt
optimize` on that script with the GPU-only fixes (pinned non-blocking copies, cudnn.benchmark) and
the sync fix, then with ``--fix amp`` in bf16 and in fp16 (loss scaling): gains and verification.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve().parent / "cuda_train.py"
DOC = ROOT / "docs" / "gpu-validation.md"


def gpuopt(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuopt", *args], cwd=cwd, capture_output=True, text=True
    )


def check_nvml() -> str:
    import torch

    from gpuopt.probes.accelerator import open_nvml
    from gpuopt.probes.samplers import UtilizationSampler

    nvml, note = open_nvml()
    if nvml is None:
        return f"NVML: not available ({note})"
    sampler = UtilizationSampler(interval=0.1, nvml=nvml, nvml_note=None)
    from gpuopt.probes.protocol import RunContext

    sampler.start(RunContext(script="gpu-check", user_roots=[ROOT], out_dir=ROOT))
    a = torch.randn(4096, 4096, device="cuda")
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 2.0:
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
    sampler.stop()
    util = sampler.result()
    return f"NVML: {util.samples} samples in 2 s of matmuls, GPU utilization {util.gpu}"


def check_profile(tmp: Path) -> str:
    r = gpuopt("profile", "--quiet", "-o", "prof", "--steps", "40", str(SCRIPT), cwd=tmp)
    if r.returncode != 0:
        return f"profile: FAILED ({r.stderr.strip().splitlines()[-1:]})"
    doc = json.loads((tmp / "prof" / "profile.json").read_text())
    ids = sorted({f["id"] for f in doc["findings"]})
    gpu = doc.get("gpu") or []
    util = gpu[0].get("utilization") if gpu else None
    return (
        f"profile: {doc['steps']['measured']} measured steps, breakdown {doc['breakdown']}, "
        f"trace gpu utilization {util}, findings {ids}"
    )


def check_aot() -> str:
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests/test_aot_cuda.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return f"AoT CUDA executor tests: {r.stdout.strip().splitlines()[-1] if r.stdout else r.stderr}"


def check_optimize(tmp: Path, label: str, fixes: list[str], *extra: str) -> str:
    out = label.replace(" ", "-")
    named = [a for f in fixes for a in ("--fix", f)]
    r = gpuopt(
        "optimize", "--quiet", "-o", out, "--steps", "40", *named, *extra, str(SCRIPT), cwd=tmp
    )
    if r.returncode != 0:
        return f"{label}: FAILED ({r.stderr.strip().splitlines()[-1:]})"
    doc = json.loads((tmp / out / "optimize.json").read_text())
    rows = "; ".join(
        f"{f['id']}: applied={f['applied']} verified={f['verified']} gain={f['gain']}"
        for f in doc["fixes"]
    )
    ver = (doc.get("verification") or {}).get("verified")
    return f"{label}: speedup {doc['speedup']}, training {ver}; {rows}"


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("gpu-check: no CUDA device on this machine: nothing to check (exit 0)")
        return 0
    name = torch.cuda.get_device_name(0)
    lines = [f"## {dt.date.today().isoformat()} — {name}, torch {torch.__version__}", ""]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for check in (
            check_nvml,
            lambda: check_profile(tmp),
            check_aot,
            lambda: check_optimize(
                tmp, "optimize", ["pinned-copies", "cudnn-benchmark", "aot", "syncs"]
            ),
            lambda: check_optimize(tmp, "optimize amp bf16", ["amp"], "--amp-dtype", "bf16"),
            lambda: check_optimize(tmp, "optimize amp fp16", ["amp"], "--amp-dtype", "fp16"),
        ):
            try:
                result = check()
            except Exception as exc:  # one failing check must not hide the others
                result = (
                    f"{getattr(check, '__name__', 'check')}: FAILED {type(exc).__name__}: {exc}"
                )
            print(result)
            lines.append(f"- {result}")
    with DOC.open("a") as fh:
        fh.write("\n" + "\n".join(lines) + "\n")
    print(f"gpu-check: appended to {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
