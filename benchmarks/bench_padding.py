"""Padding-based batching on a long-tailed length distribution: the per-sample loop,
strength (a) (the same batches, padded, masked loss) and strength (b) (length-bucketed, padded
batches), in samples per second, with the padding waste and the masked loss checked against the
per-sample loss.

    python benchmarks/bench_padding.py [--rounds 7] [--threads 1] [--json FILE]

The data: 2048 sequences whose lengths are log-normal (median 12, long tail to 256) of 8
features, a position-wise MLP (8 → 32 ×4 → 4: ``--layers 4`` hidden layers), batches of 64
(``--batch``), SGD. One *round* trains one epoch
each way, in rotation (loop, a, b, then the next round in another order), from the same initial
weights; a step's time includes its batching (``pad_collate`` in the step for (a) and (b), as a
DataLoader with ``num_workers=0`` would). The speedups are medians over rounds of the per-round
ratios of samples per second, with their range, both by the wall clock and by this thread's CPU
time (with one intra-op thread all the work is on it: the CPU time does not count the time the
scheduler gives to other processes on this shared machine). Before timing, every batch of (a) is
checked:
the masked loss against the sum of the per-sample losses (relative difference), and the
gradients on the first batches.

``--threads 1`` (the default) pins torch to one intra-op thread: on this shared 2-core machine a
large op split over two threads waits for a second thread the scheduler may not run for
milliseconds (see bench_vectorize.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from gpuopt.batching import LengthBucketSampler, masked_loss, pad_collate, padding_waste

DIM, HIDDEN, OUT = 8, 32, 4
BATCH = 64  # --batch
LAYERS = 4  # --layers: hidden layers of the position-wise MLP


def data(n: int, seed: int = 0) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.empty(n).log_normal_(2.5, 0.8, generator=g).clamp(2, 256).long()
    w = torch.randn(DIM, OUT, generator=g)
    xs = [torch.randn(int(n_i), DIM, generator=g) for n_i in lengths]
    return xs, [torch.sin(x @ w) for x in xs]


def model_and_opt(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = [torch.nn.Linear(DIM, HIDDEN), torch.nn.ReLU()]
    for _ in range(LAYERS - 1):
        layers += [torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(HIDDEN, OUT))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def loop_step(model: Any, xs: list[torch.Tensor], ys: list[torch.Tensor]) -> torch.Tensor:
    loss = 0.0
    for x, y in zip(xs, ys, strict=True):
        loss = loss + F.mse_loss(model(x), y)
    return loss  # type: ignore[return-value]


def padded_step(model: Any, xs: list[torch.Tensor], ys: list[torch.Tensor]) -> torch.Tensor:
    x, y = pad_collate(xs), pad_collate(ys)
    return masked_loss(F.mse_loss, model(x.data), y, batch_reduction="sum")


def epoch(
    step: Callable[..., torch.Tensor],
    batches: list[list[int]],
    xs: list[torch.Tensor],
    ys: list[torch.Tensor],
) -> tuple[float, float]:
    """One epoch's training: samples per second of wall-clock time and of this thread's CPU
    time (one intra-op thread: the CPU time is the work itself, whatever else the machine
    runs)."""
    model, opt = model_and_opt()
    samples = 0
    t, c = time.perf_counter(), time.thread_time()
    for batch in batches:
        opt.zero_grad()
        loss = step(model, [xs[i] for i in batch], [ys[i] for i in batch])
        loss.backward()
        opt.step()
        samples += len(batch)
    return samples / (time.perf_counter() - t), samples / (time.thread_time() - c)


def verify(xs: list[torch.Tensor], ys: list[torch.Tensor], batches: list[list[int]]) -> dict:
    model, _ = model_and_opt()
    params = list(model.parameters())
    worst_loss = worst_grad = 0.0
    for k, batch in enumerate(batches):
        bx, by = [xs[i] for i in batch], [ys[i] for i in batch]
        a, b = loop_step(model, bx, by), padded_step(model, bx, by)
        worst_loss = max(worst_loss, abs(float(a.detach() - b.detach())) / abs(float(a.detach())))
        if k < 8:
            for ga, gb in zip(
                torch.autograd.grad(a, params), torch.autograd.grad(b, params), strict=True
            ):
                worst_grad = max(worst_grad, float((ga - gb).abs().max() / ga.abs().max()))
    return {"max_rel_loss_diff": worst_loss, "max_rel_grad_diff": worst_grad}


def main() -> None:
    global BATCH, LAYERS
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--json", type=str, default=None)
    args = ap.parse_args()
    BATCH, LAYERS = args.batch, args.layers
    torch.set_num_threads(args.threads)
    xs, ys = data(args.samples)
    lengths = [len(x) for x in xs]
    order = torch.randperm(len(xs), generator=torch.Generator().manual_seed(1)).tolist()
    shuffled = [order[i : i + BATCH] for i in range(0, len(order), BATCH)]
    bucketed = list(LengthBucketSampler(lengths, BATCH, seed=1))
    q = statistics.quantiles(lengths, n=100)
    print(
        f"{len(xs)} samples, lengths median {q[49]:.0f}, p90 {q[89]:.0f}, p99 {q[98]:.0f}, "
        f"max {max(lengths)}; batches of {BATCH}, {LAYERS} hidden layers; "
        f"torch threads {args.threads}; "
        f"load {os.getloadavg()[0]:.2f}"
    )
    waste = {"a": padding_waste(lengths, shuffled), "b": padding_waste(lengths, bucketed)}
    print(f"padding waste: (a) {waste['a']:.1%}, (b) bucketed {waste['b']:.1%}")
    check = verify(xs, ys, shuffled)
    print(
        f"masked loss vs per-sample loss, every batch: max relative difference "
        f"{check['max_rel_loss_diff']:.2e}; gradients (8 batches) {check['max_rel_grad_diff']:.2e}"
    )
    runs = {
        "loop": (loop_step, shuffled),
        "a": (padded_step, shuffled),
        "b": (padded_step, bucketed),
    }
    epoch(padded_step, bucketed[:4], xs, ys)  # warm-up
    rates: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
    names = list(runs)
    for r in range(args.rounds):
        for name in names[r % 3 :] + names[: r % 3]:
            step, batches = runs[name]
            rates[name].append(epoch(step, batches, xs, ys))
    result: dict[str, Any] = {}
    for clock, j in (("wall", 0), ("cpu", 1)):
        med = {k: statistics.median(v[j] for v in rates[k]) for k in runs}
        ratio = {
            k: [rates[k][i][j] / rates["loop"][i][j] for i in range(args.rounds)] for k in "ab"
        }
        result[clock] = {"samples_per_s": med, "ratios": ratio}
        print(f"-- {clock} clock" + (" (this thread's CPU time)" if clock == "cpu" else ""))
        for k, label in (("loop", "per-sample loop"), ("a", "(a) padded"), ("b", "(b) bucketed")):
            extra = (
                f"  {statistics.median(ratio[k]):.2f}x the loop ({min(ratio[k]):.2f}-"
                f"{max(ratio[k]):.2f})"
                if k in ratio
                else ""
            )
            print(f"{label:<18} {med[k]:>9.0f} samples/s{extra}")
    print(f"load at the end {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"results": result, "waste": waste, "check": check}, fh)


if __name__ == "__main__":
    main()
