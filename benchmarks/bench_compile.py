"""What the compile probe costs (docs/compile.md), each part measured on its own.

The probe has four costs, none of them on a compiled step's own path:

1. **Every run** (compiling or not): one ``time.time()`` read and a list append per step
   (``on_step``), and ``torch.compile`` swapped for a wrapper (one attribute swap at start).
2. **Every compile of a frame**: the wrapper around Dynamo's graph-break log call (it resolves
   the break's user stack) and the tap on Dynamo's record list. Timed here as the CPU time of
   compiling a function with three graph breaks (backend "eager", ``torch._dynamo.reset()``
   before each), with and without the probe's hooks, alternating.
3. **Importing torch._dynamo** goes through the probe's import hook (a timer): one call.
4. **One profiled step** when something compiled (the ops left eager between graphs): a CPU
   ``torch.profiler`` run over one step, left out of the statistics. Timed as the step with and
   without the profiler (start, stop and the count included), alternating.

Every comparison alternates the variants and reports medians with their spread (min–max), in
thread CPU time where the work is single-threaded (load-independent), else wall time.

    python benchmarks/bench_compile.py [--reps 9] [--steps 2000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from installed import ROOT, compile_gpuopt

sys.path.insert(0, str(ROOT))


def _spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.4g} ({min(xs):.4g}–{max(xs):.4g})"


def _alternate(
    reps: int, a: Callable[[], float], b: Callable[[], float]
) -> tuple[list[float], list[float]]:
    out_a, out_b = [], []
    for i in range(reps):
        for first in (True, False) if i % 2 == 0 else (False, True):
            (out_a if first else out_b).append(a() if first else b())
    return out_a, out_b


def _on_step_cost(probe: Any, steps: int, reps: int) -> tuple[list[float], list[float]]:
    def with_probe() -> float:
        t0 = time.thread_time()
        for i in range(steps):
            probe.on_step(i, 0.0)
        dt = (time.thread_time() - t0) / steps * 1e6
        probe._step_walls.clear()
        return dt

    def empty() -> float:
        noop = lambda i, t: None  # noqa: E731  (the call a probe-less listener list would make)
        t0 = time.thread_time()
        for i in range(steps):
            noop(i, 0.0)
        return (time.thread_time() - t0) / steps * 1e6

    return _alternate(reps, with_probe, empty)


BREAKS_SRC = """
import torch

def f(x):
    y = x * 2
    print("a", y.shape)
    s = y.sum().item()
    if y.mean() > 0:
        y = y + 1
    return y * s
"""


def _compile_cost(torch: Any, probe: Any, reps: int) -> tuple[list[float], list[float]]:
    import torch._dynamo

    ns: dict[str, Any] = {}
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False, dir=ROOT) as fh:
        fh.write(BREAKS_SRC)
    code = compile(BREAKS_SRC, fh.name, "exec")
    exec(code, ns)
    x = torch.randn(8)

    def once(hooked: bool) -> float:
        torch._dynamo.reset()
        if hooked:
            probe._attach()
        try:
            g = torch.compile(ns["f"], backend="eager")
            t0 = time.thread_time()
            g(x)
            return time.thread_time() - t0
        finally:
            if hooked:
                probe._detach()

    once(False)  # warm-up: imports, caches
    try:
        return _alternate(reps, lambda: once(True), lambda: once(False))
    finally:
        Path(fh.name).unlink()


def _window_cost(torch: Any, reps: int) -> tuple[list[float], list[float]]:
    from gpuopt.compile.regions import count_regions
    from gpuopt.probes.compile import _spans

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(64, 64)
            self.b = torch.nn.Linear(64, 1)

        def forward(self, x: Any) -> Any:
            h = torch.relu(self.a(x))
            s = h.mean().item()
            return self.b(h).mean() * s

    model = torch.compile(Net(), backend="aot_eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 64)

    def step() -> None:
        loss = model(x)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(5):
        step()  # compile and settle

    def profiled() -> float:
        from torch.profiler import ProfilerActivity, profile

        t0 = time.perf_counter()
        prof = profile(activities=[ProfilerActivity.CPU])
        prof.start()
        step()
        prof.stop()
        count_regions(_spans(prof))
        return time.perf_counter() - t0

    def plain() -> float:
        t0 = time.perf_counter()
        step()
        return time.perf_counter() - t0

    return _alternate(reps, profiled, plain)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--steps", type=int, default=2000)
    a = ap.parse_args()
    compile_gpuopt()
    import torch

    from gpuopt.probes.compile import CompileProbe
    from gpuopt.probes.protocol import RunContext

    torch.set_num_threads(1)
    tmp = tempfile.TemporaryDirectory()
    ctx = RunContext(script=__file__, user_roots=[ROOT], out_dir=Path(tmp.name))
    probe = CompileProbe()
    probe.start(ctx)
    probe.window_step = None  # the per-step cost alone
    loadavg = (
        Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    )
    print(f"command: python benchmarks/bench_compile.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"torch {torch.__version__}; load average {' '.join(loadavg)}; medians (min–max)\n")
    on, off = _on_step_cost(probe, a.steps, a.reps)
    print("| part | with the probe | without | cost |")
    print("|---|---|---|---|")
    cost = statistics.median(on) - statistics.median(off)
    print(
        f"| per step (`on_step`), µs thread CPU | {_spread(on)} | {_spread(off)} | {cost:.3g} µs |"
    )
    t0 = time.perf_counter()
    import torch._dynamo  # noqa: F401  (through the probe's import hook)

    import_s = time.perf_counter() - t0
    probe._detach()  # the import attached the hooks: each comparison below sets them itself
    hooked, bare = _compile_cost(torch, probe, a.reps)
    extra = statistics.median(hooked) / statistics.median(bare) - 1
    print(
        f"| compiling a function with 3 graph breaks (4 frames), s thread CPU | "
        f"{_spread(hooked)} | {_spread(bare)} | {100 * extra:+.1f}% |"
    )
    prof, plain = _window_cost(torch, a.reps)
    d = statistics.median(prof) - statistics.median(plain)
    print(
        f"| one compiled step, CPU-profiled and counted (s wall) | {_spread(prof)} | "
        f"{_spread(plain)} | +{1e3 * d:.3g} ms, once a run |"
    )
    probe.stop()
    tmp.cleanup()
    print(f"\nimporting torch._dynamo (timed by the probe's import hook): {import_s:.2f} s")


if __name__ == "__main__":
    main()
