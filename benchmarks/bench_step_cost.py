"""Per-step cost of gpuopt's always-on probes: what each hook costs per call, measured directly.

Why not time a training loop with and without the probes: on this project's VM the speed of the
same loop swings by ±10-15% from one second to the next (measured here too: blocks of 20 steps
with and without probes, alternating in one process, give ratios from 0.83 to 1.25), far more
than a per-step cost of microseconds. So each hook ``gpuopt profile`` keeps on for the whole run
is timed on its own, over thousands of calls, alternately with and without it:

* the optimizer step hook (one per training step): ``opt.step()`` of a one-parameter optimizer;
* the DataLoader wait probe (one per batch): ``next()`` on a DataLoader over an in-memory dataset;
* a whole step's path as a run after its windows has it: ``next(loader)`` of an ``(x, y)`` batch
  (the wait probe and the batch shapes), ``loss.backward()`` (the backward marker) and
  ``opt.step()`` (the step clock and its listeners: the recorder, done);
* the CPU/RSS sampler thread: one ``tick`` (every 0.2 s by default), whose time holds the GIL.

Times are the thread's CPU time (``time.thread_time``), medians of alternating reps: other
processes on the machine change the wall clock far more than a microsecond of hooks.

The per-step overhead bound is then (hook costs per step + sampler time per second x step time)
/ step time, for the benchmark workload's measured step. The recorder is not included: it runs
only in a 3-step window (bench_recorder.py; bench_profile.py for a whole run).

    python benchmarks/bench_step_cost.py [--reps 15] [--calls 2000] [--step-ms 35]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from installed import compile_gpuopt


def per_call_us(
    run: Callable[[int], None],
    calls: int,
    reps: int,
    on: Callable[[], None],
    off: Callable[[], None],
) -> tuple[float, float]:
    """Median per-call CPU time of this thread without and with the hook (µs), alternating reps
    to cancel drift (thread CPU time: what other processes do to the wall clock stays out)."""
    without, with_ = [], []
    run(calls // 10)  # warm-up
    for i in range(reps):
        for hooked in (False, True) if i % 2 == 0 else (True, False):
            if hooked:
                on()
            try:
                t0 = time.thread_time()
                run(calls)
                dt = (time.thread_time() - t0) / calls * 1e6
            finally:
                if hooked:
                    off()
            (with_ if hooked else without).append(dt)
    return statistics.median(without), statistics.median(with_)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument(
        "--step-ms",
        type=float,
        default=35.0,
        help="the workload's step time (bench_profile.py measures it)",
    )
    ap.add_argument(
        "--interval", type=float, default=0.2, help="the sampler's interval (gpuopt's default)"
    )
    a = ap.parse_args()
    compile_gpuopt()
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from gpuopt.probes import steps as steps_mod
    from gpuopt.probes.dataloader import DataLoaderProbe
    from gpuopt.probes.protocol import RunContext
    from gpuopt.probes.recorder import DispatchRecorder
    from gpuopt.probes.samplers import UtilizationSampler

    torch.set_num_threads(1)
    tmp = tempfile.TemporaryDirectory()
    ctx = RunContext(script=__file__, user_roots=[Path(__file__).parent], out_dir=Path(tmp.name))

    # 1. the optimizer step hook
    p = torch.nn.Parameter(torch.zeros(1))
    p.grad = torch.zeros(1)
    opt = torch.optim.SGD([p], lr=0.1)
    clock = steps_mod.StepClock()

    def steps(n: int) -> None:
        for _ in range(n):
            opt.step()

    step_off, step_on = per_call_us(
        steps, a.calls, a.reps, lambda: steps_mod.install(clock), steps_mod.uninstall
    )

    # 2. the DataLoader wait probe (per batch)
    data = TensorDataset(torch.zeros(a.calls, 1))
    probe = DataLoaderProbe(step_count=lambda: 0)

    def batches(n: int) -> None:
        it = iter(DataLoader(data, batch_size=1))
        for _ in range(min(n, a.calls)):
            next(it)

    dl_off, dl_on = per_call_us(batches, a.calls, a.reps, lambda: probe.start(ctx), probe.stop)

    # 3. the whole per-step path of a run after its windows: one next(loader) of an (x, y)
    # batch (wait probe, batch shapes), one loss.backward() (the backward marker), one
    # opt.step() (the step clock and its listeners), as a session installs them
    run_clock = steps_mod.StepClock()
    run_probe = DataLoaderProbe(step_count=lambda: run_clock.count)
    recorder = DispatchRecorder()
    run_ctx = RunContext(
        script=__file__,
        user_roots=[Path(__file__).parent],
        out_dir=Path(tmp.name),
        window_start=1,
        window_steps=1,
    )
    recorder.start(run_ctx)
    run_clock.listeners.append(recorder.on_step)
    w = torch.nn.Parameter(torch.ones(1))
    sgd = torch.optim.SGD([w], lr=1e-6)
    pairs = TensorDataset(
        torch.zeros(4 * a.calls, 3, 8, 8), torch.zeros(4 * a.calls, 8, 8, dtype=torch.long)
    )
    run_loader = DataLoader(pairs, batch_size=4)

    def train_steps(n: int) -> None:
        it = iter(run_loader)  # one epoch per rep (an epoch's start is not a step's cost)
        for _ in range(min(n, a.calls)):
            next(it)
            (w * 2.0).sum().backward()
            sgd.step()

    def session_on() -> None:
        run_probe.start(run_ctx)
        steps_mod.install(run_clock)

    def session_off() -> None:
        steps_mod.uninstall()
        run_probe.stop()

    session_on()
    train_steps(4)  # the recorder's window (step 1) passes; from here it only counts steps
    session_off()
    assert recorder.done, "the recorder's window did not end"
    path_off, path_on = per_call_us(train_steps, a.calls, a.reps, session_on, session_off)
    recorder.stop()

    # 4. one sampler tick (process-tree CPU and RSS through psutil)
    # The sampler's clock advances one interval per tick, as in a run, so the process-tree
    # refresh (every second) lands on the same share of ticks as it does there.
    fake_now = [0.0]

    def sampler_clock() -> float:
        fake_now[0] += a.interval
        return fake_now[0]

    sampler = UtilizationSampler(
        interval=a.interval, nvml=None, nvml_note="benchmark", clock=sampler_clock
    )
    sampler.start(ctx, thread=False)
    ticks = []
    for _ in range(a.reps):
        t0 = time.thread_time()
        for _ in range(100):
            sampler.tick()
        ticks.append((time.thread_time() - t0) / 100 * 1e6)
    tick_us = statistics.median(ticks)
    tmp.cleanup()

    step_us = a.step_ms * 1e3
    hooks_us = path_on - path_off  # one batch, one backward, one optimizer step per step
    sampler_share = tick_us / (a.interval * 1e6)  # of wall time, while it holds the GIL
    bound = (max(hooks_us, 0.0) + sampler_share * step_us) / step_us
    print(f"command: python benchmarks/bench_step_cost.py {' '.join(sys.argv[1:])}".rstrip())
    print(f"torch {torch.__version__}; medians of {a.reps} alternating reps of {a.calls} calls\n")
    print("| hook | per call without | with | cost per call |")
    print("|---|---:|---:|---:|")
    print(
        f"| optimizer step hook (`opt.step()`) | {step_off:.2f} µs | {step_on:.2f} µs "
        f"| {step_on - step_off:.2f} µs |"
    )
    print(
        f"| DataLoader wait probe (`next(loader)`) | {dl_off:.2f} µs | {dl_on:.2f} µs "
        f"| {dl_on - dl_off:.2f} µs |"
    )
    print(
        "| a whole step's path: `next(loader)` of an (x, y) batch, `loss.backward()`, "
        f"`opt.step()` | {path_off:.2f} µs | {path_on:.2f} µs | {path_on - path_off:.2f} µs |"
    )
    print(
        f"| sampler tick (every {a.interval} s, in its own thread) | — | {tick_us:.1f} µs "
        f"| {sampler_share * 100:.3f}% of wall time |"
    )
    print(
        f"\nPer-step overhead on a {a.step_ms:.0f} ms step "
        "(a whole step's path, the sampler's GIL time): "
        f"**{bound * 100:.3f}%**"
    )


if __name__ == "__main__":
    main()
