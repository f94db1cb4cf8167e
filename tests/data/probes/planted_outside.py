"""Planted: a step of 300 tiny ops, then time that issues no tensor op at all: a sleep, a
blocking read of a file, or a pure-Python loop. That time is not dispatch ("other", at its line),
never launch-bound."""

import time

import torch


def tiny_ops(x: torch.Tensor) -> torch.Tensor:
    for _ in range(100):
        x = (x * 1.0001 + 0.0001).relu()  # TINY-OPS
    return x


def with_sleep(x: torch.Tensor, seconds: float) -> torch.Tensor:
    """Sleep ``seconds``, or twice as long as the ops took if longer: a loaded machine slows the
    ops (recorded one by one) and not the sleep, and the sleep stays most of the step."""
    t0 = time.perf_counter()
    x = tiny_ops(x)
    time.sleep(max(seconds, 2 * (time.perf_counter() - t0)))  # SLEEP
    return x.sum()


def with_read(x: torch.Tensor, path: str) -> torch.Tensor:
    x = tiny_ops(x)
    with open(path, "rb") as fh:
        data = fh.read()  # READ
    return x.sum() + len(data) % 2


def with_loop(x: torch.Tensor, n: int) -> torch.Tensor:
    x = tiny_ops(x)
    total = 0
    for i in range(n):
        total += (i * i) % 7  # LOOP
    return x.sum() + total % 2


def with_stall(x: torch.Tensor, seconds: float, step: int) -> torch.Tensor:
    """A stall at its own place in each step (the machine, not the code: a run slowed by it)."""
    at = (step * 37) % 100
    for j in range(100):
        x = (x * 1.0001 + 0.0001).relu()
        if j == at:
            time.sleep(seconds)  # STALL
    return x.sum()
