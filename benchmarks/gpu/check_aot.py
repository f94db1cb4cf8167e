"""gpu-check: gpuopt.aot's scheduled zoo models against eager and a one-stream CUDA graph.

    python3 benchmarks/gpu/check_aot.py [--budget 40]

For each zoo model at its small size (batch 1, eval): eager, the eager model captured whole into
one CUDA graph on one stream (the baseline a scheduler must beat), and ``gpuopt.aot.schedule``'s
multi-stream CUDA graph; medians of CUDA-event timings (20 runs after 5 warm-up runs), the
planning time, and the largest difference from eager's output. One Markdown row per model, as
it is measured; models the budget leaves no time for are said so. In a dry run (no GPU) the same
rows on the CPU: eager against the scheduled module's CPU executor, a few runs, no graphs.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

from _common import device_or_skip, parse_budget, say

MODELS = ("resnet_stage", "transformer_block", "inception_v3", "nasnet_a_mobile")
RUNS, WARMUP = 20, 5


def _timed(fn: Callable[[], Any], device: str, runs: int, warmup: int) -> float:
    """Median milliseconds of ``fn()``: CUDA events on a GPU, the host clock on the CPU."""
    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _one_stream_graph(model: Any, x: Any) -> tuple[Callable[[], Any], Any]:
    """The eager model captured whole into one CUDA graph; (replay, its static output)."""
    import torch

    static = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            model(static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        out = model(static)
    return graph.replay, out


def check_model(name: str, device: str) -> str:
    import torch

    from gpuopt.aot import schedule, zoo

    model, inputs = zoo.ZOO[name]("small")
    model = model.to(device)
    x = inputs[0].to(device)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sm = schedule(model, (x,), cuda_graph=device == "cuda")
    plan_s = time.perf_counter() - t0
    runs, warmup = (RUNS, WARMUP) if device == "cuda" else (3, 1)
    with torch.no_grad():
        expected = model(x)
        eager_ms = _timed(lambda: model(x), device, runs, warmup)
    got = sm(x)
    diff = float((got - expected).abs().max())
    sched_ms = _timed(lambda: sm(x), device, runs, warmup)
    graph_cell = "–"
    if device == "cuda":
        replay, _ = _one_stream_graph(model, x)
        graph_ms = _timed(replay, device, runs, warmup)
        graph_cell = f"{graph_ms:.3f}"
    else:
        graph_ms = float("nan")
    vs_graph = f"{graph_ms / sched_ms:.2f}×" if device == "cuda" else "–"
    return (
        f"| {name} | {sm.plan.num_streams} | {eager_ms:.3f} | {graph_cell} | {sched_ms:.3f} | "
        f"{eager_ms / sched_ms:.2f}× | {vs_graph} | {plan_s:.1f} | {diff:.1e} |"
    )


def main() -> int:
    budget = parse_budget(__doc__, default=40.0)
    device = device_or_skip()
    if device is None:
        return 0
    graph_note = "multi-stream CUDA graph" if device == "cuda" else "CPU executor, no graph"
    say(f"- AoT zoo models (small, batch 1, eval) on {device}: schedule = {graph_note}")
    say("")
    say(
        "| model | streams | eager ms | one-stream CUDA graph ms | schedule ms | vs eager | "
        "vs one-stream graph | planning s | max abs diff vs eager |"
    )
    say("|---|---|---|---|---|---|---|---|---|")
    models = MODELS if device == "cuda" else MODELS[:2]
    for i, name in enumerate(models):
        if budget.left() < 8:
            say(f"| {', '.join(models[i:])} | not measured: budget spent | | | | | | | |")
            break
        try:
            say(check_model(name, device))
        except Exception as exc:  # one model failing must not hide the others
            say(f"| {name} | FAILED: {type(exc).__name__}: {str(exc)[:150]} | | | | | | | |")
    say("")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
