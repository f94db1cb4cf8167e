"""gpu-check: NVML sampling while the GPU works (2 s of matmuls, gpuopt's own sampler).

python3 benchmarks/gpu/check_nvml.py [--budget 10]
"""

from __future__ import annotations

import time

from _common import ROOT, device_or_skip, parse_budget, say


def main() -> int:
    budget = parse_budget(__doc__, default=10.0)
    device = device_or_skip()
    if device is None:
        return 0
    import torch

    from gpuopt.probes.accelerator import open_nvml
    from gpuopt.probes.protocol import RunContext
    from gpuopt.probes.samplers import UtilizationSampler

    nvml, note = open_nvml()
    if nvml is None:
        say(f"- NVML: not available ({note})")
        return 0
    sampler = UtilizationSampler(interval=0.1, nvml=nvml, nvml_note=None)
    sampler.start(RunContext(script="gpu-check", user_roots=[ROOT], out_dir=ROOT))
    a = torch.randn(4096, 4096, device=device)
    seconds = min(2.0, max(budget.left() - 3.0, 0.5))
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
    sampler.stop()
    util = sampler.result()
    gpu = util.gpu
    mean = f"{gpu.mean:.0f}%" if gpu and gpu.mean is not None else "–"
    peak = f"{gpu.max:.0f}%" if gpu and gpu.max is not None else "–"
    say(
        f"- NVML: {util.samples} samples in {seconds:.1f} s of 4096² matmuls, "
        f"GPU utilization mean {mean}, max {peak}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
