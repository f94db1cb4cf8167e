"""What the dispatch recorder costs: per op, and for a whole run with the default window.

Run: ``python benchmarks/bench_recorder.py [--quick]`` (CPU is enough; on a GPU machine the op
loops still run on CPU so the numbers compare across machines). Everything is measured side by
side in one process: each configuration alternates with its baseline over several rounds and the
median is reported, so machine load hits both alike.

Part 1, per op: a loop of one kind of op, called from a user-code frame, timed without any mode,
with two empty modes (the floor any Python dispatch mode pays), and with the recorder.

Part 2, whole run: a small CPU training script of N steps driven exactly as ``gpuopt profile``
drives its probes (start, on_step per step, stop, result and summary), with the recorder's default
window (3 steps after 2 warm-up steps) versus no recorder. The ratio is total wall time, the
end-of-run summary and calibration included.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from gpuopt.assemble.host_summary import summarize  # noqa: E402
from gpuopt.probes.protocol import RunContext  # noqa: E402
from gpuopt.probes.recorder import DispatchRecorder  # noqa: E402
from gpuopt.probes.recorder_engine import RecorderEngine  # noqa: E402
from gpuopt.sites import SiteResolver  # noqa: E402


class _EmptyFunction(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


class _EmptyDispatch(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


# -- part 1: per op -------------------------------------------------------------------------
def _workloads() -> dict[str, tuple[Callable[[int], None], int]]:
    """name -> (loop of n calls, aten ops per call)."""
    a, b = torch.ones(16), torch.ones(16)
    x = torch.randn(64, 64)
    m1, m2 = torch.randn(256, 256), torch.randn(256, 256)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    data = torch.randn(32, 64)

    def tiny_add(n: int) -> None:
        for _ in range(n):
            a + b

    def index_row(n: int) -> None:
        for i in range(n):
            x[i % 64]

    def matmul_256(n: int) -> None:
        for _ in range(n):
            m1 @ m2

    def mlp_fwd_bwd(n: int) -> None:
        for _ in range(n):
            model(data).sum().backward()

    def pick(i: int) -> Any:
        return x[i % 64]  # in no loop: the recorder walks out to the loop that calls it

    def index_via_helper(n: int) -> None:
        for i in range(n):
            pick(i)

    ops_per_call = {
        "tiny_add": 1,
        "index_row": 1,
        "matmul_256": 1,
        "mlp_fwd_bwd": _count_ops(mlp_fwd_bwd),
        "index_via_helper": 1,
    }
    return {
        "tiny_add": (tiny_add, ops_per_call["tiny_add"]),
        "index_row": (index_row, ops_per_call["index_row"]),
        "matmul_256": (matmul_256, ops_per_call["matmul_256"]),
        "mlp_fwd_bwd": (mlp_fwd_bwd, ops_per_call["mlp_fwd_bwd"]),
        "index_via_helper": (index_via_helper, ops_per_call["index_via_helper"]),
    }


def _count_ops(loop: Callable[[int], None]) -> int:
    engine = RecorderEngine(SiteResolver([HERE]), cpu_only=True)
    engine.turn_on(patch_sync=False)
    try:
        loop(1)
    finally:
        engine.turn_off()
    return engine.acc.ops


def _time(loop: Callable[[int], None], n: int, setup: str) -> float:
    modes: list[Any] = []
    engine = None
    if setup == "empty":
        modes = [_EmptyDispatch(), _EmptyFunction()]
    elif setup == "recorder":
        engine = RecorderEngine(SiteResolver([HERE]), cpu_only=True)
    for m in modes:
        m.__enter__()
    if engine is not None:
        engine.turn_on(patch_sync=False)
    try:
        t0 = time.perf_counter()
        loop(n)
        return time.perf_counter() - t0
    finally:
        if engine is not None:
            engine.turn_off()
        for m in reversed(modes):
            m.__exit__(None, None, None)


def per_op(rounds: int, n: int) -> list[dict[str, Any]]:
    rows = []
    for name, (loop, ops) in _workloads().items():
        calls = max(n // ops, 5) if ops > 1 else n
        if name == "matmul_256":
            calls = max(n // 10, 20)
        for setup in ("none", "empty", "recorder"):
            _time(loop, min(calls, 50), setup)  # warm-up
        samples: dict[str, list[float]] = {"none": [], "empty": [], "recorder": []}
        for _ in range(rounds):
            for setup in ("none", "empty", "recorder"):
                samples[setup].append(_time(loop, calls, setup) / (calls * ops) * 1e6)
        med = {k: statistics.median(v) for k, v in samples.items()}
        rows.append(
            {
                "workload": name,
                "ops_per_call": ops,
                "none_us": med["none"],
                "empty_modes_us": med["empty"],
                "recorder_us": med["recorder"],
                "overhead_us": med["recorder"] - med["none"],
                "ratio": med["recorder"] / med["none"],
            }
        )
    return rows


# -- part 2: whole run ----------------------------------------------------------------------
def _training(steps: int, tiny: bool) -> Callable[[Callable[[int], None] | None], None]:
    torch.manual_seed(0)
    if tiny:  # many small ops: the recorder's worst case relative to step time
        model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(12)])
        data = torch.randn(8, 16)
    else:
        model = torch.nn.Sequential(
            torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)
        )
        data = torch.randn(128, 256)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def run(on_step: Callable[[int], None] | None) -> None:
        for i in range(steps):
            loss = model(data).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            if on_step is not None:
                on_step(i)

    return run


def _whole_run(
    run: Callable[[Callable[[int], None] | None], None], with_recorder: bool
) -> dict[str, float]:
    """One whole run: wall and process CPU seconds, and (with the recorder) the recorder's own
    time measured directly: start + the window steps' excess over a typical step + stop +
    result and summary (calibration included)."""
    w0, c0 = time.perf_counter(), time.process_time()
    if not with_recorder:
        run(None)
        return {"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0}
    probe = DispatchRecorder()
    ends: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        t_start = time.perf_counter()
        probe.start(
            RunContext(
                script="bench",
                user_roots=[HERE],
                out_dir=Path(tmp),
                warmup=2,
                window_start=2,
                window_steps=3,
            )
        )
        started = time.perf_counter()

        def on_step(i: int) -> None:
            probe.on_step(i, time.perf_counter())
            ends.append(time.perf_counter())

        run(on_step)
        t_stop = time.perf_counter()
        probe.stop()
        summarize(probe.result(), [])
        t_end = time.perf_counter()
    durations = [b - a for a, b in zip(ends, ends[1:], strict=False)]  # durations[k] = step k + 1
    window = durations[1:4]  # steps 2, 3, 4
    typical = (
        statistics.median(durations[5:]) if len(durations) > 6 else statistics.median(durations)
    )
    direct = (started - t_start) + sum(d - typical for d in window) + (t_end - t_stop)
    return {"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0, "direct": direct}


def whole_run(rounds: int, configs: list[tuple[str, int, bool]]) -> list[dict[str, Any]]:
    """Paired rounds (without, then with, back to back). The recorder's cost is reported two
    ways: measured directly inside the run (precise), and as the median of the paired wall-time
    ratios (includes everything, but carries the machine's run-to-run noise)."""
    rows = []
    for name, steps, tiny in configs:
        run = _training(steps, tiny)
        run(None)  # warm-up
        pairs = [(_whole_run(run, False), _whole_run(run, True)) for _ in range(rounds)]
        base = statistics.median(b["wall"] for b, _ in pairs)
        direct = statistics.median(r["direct"] for _, r in pairs)
        rows.append(
            {
                "workload": name,
                "steps": steps,
                "step_ms": base / steps * 1e3,
                "base_s": base,
                "direct_ms": direct * 1e3,
                "direct_ratio": 1 + direct / base,
                "ratio": statistics.median(r["wall"] / b["wall"] for b, r in pairs),
                "cpu_ratio": statistics.median(r["cpu"] / b["cpu"] for b, r in pairs),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds and steps (a smoke run)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rounds = 3 if args.quick else 7
    n = 300 if args.quick else 2000
    print(
        f"# bench_recorder: python {platform.python_version()}, torch {torch.__version__}, "
        f"{platform.processor() or platform.machine()}, torch threads 1, rounds {rounds} (median)"
    )
    print("\n## Per op (µs per aten op)\n")
    print(
        "| workload | aten ops per call | no recorder | two empty modes | recorder "
        "| recorder overhead | ratio |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in per_op(rounds, n):
        print(
            f"| {r['workload']} | {r['ops_per_call']} | {r['none_us']:.2f} "
            f"| {r['empty_modes_us']:.2f} | "
            f"{r['recorder_us']:.2f} | {r['overhead_us']:.2f} | {r['ratio']:.2f}x |"
        )
    steps = 60 if args.quick else 300
    configs = [
        ("mlp 256-512-256, batch 128", steps, False),
        ("12 x Linear(16,16), batch 8 (tiny ops)", steps, True),
        ("mlp 256-512-256, batch 128", steps * 5, False),
        ("12 x Linear(16,16), batch 8 (tiny ops)", steps * 5, True),
    ]
    print(
        "\n## Whole run (window 3 steps after 2 warm-up steps; summary and calibration included)\n"
    )
    print(
        "| workload | steps | step (ms) | run without (s) | recorder time, direct (ms) "
        "| ratio, direct | wall ratio, paired | CPU ratio, paired |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in whole_run(rounds, configs):
        print(
            f"| {r['workload']} | {r['steps']} | {r['step_ms']:.2f} | {r['base_s']:.3f} "
            f"| {r['direct_ms']:.1f} | "
            f"{r['direct_ratio']:.3f}x | {r['ratio']:.3f}x | {r['cpu_ratio']:.3f}x |"
        )


if __name__ == "__main__":
    main()
