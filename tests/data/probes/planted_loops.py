"""Planted: Python loops that index tensors element by element (markers name the loop lines)."""

import torch


def scale_rows(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for i in range(x.shape[0]):  # LOOP-ROWS
        out[i] = x[i] * 2
    return out


def gather_comprehension(x: torch.Tensor) -> torch.Tensor:
    return torch.stack([x[i] for i in range(0, x.shape[0], 2)])  # LOOP-COMP


def nested(x: torch.Tensor) -> torch.Tensor:
    total = x.new_zeros(())
    for i in range(4):  # LOOP-OUTER
        for j in range(3):  # LOOP-INNER
            total = total + x[i, j]
    return total


def countdown(x: torch.Tensor) -> torch.Tensor:
    n = 5
    while n > 0:  # LOOP-WHILE
        x = x + 1
        n -= 1
    return x


def one_line(x: torch.Tensor) -> None:
    for i in range(6): x[i].add_(1)  # LOOP-ONE-LINE  # noqa: E701


def train_step(x: torch.Tensor) -> torch.Tensor:
    y = scale_rows(x)
    z = gather_comprehension(y)
    t = nested(y)
    c = countdown(z)
    one_line(x)
    return c.sum() + t


def pick(x: torch.Tensor, i: int) -> torch.Tensor:
    return x[i] * 3  # HELPER-LINE


def pick_twice_removed(x: torch.Tensor, i: int) -> torch.Tensor:
    return pick(x, i)


def via_helper(x: torch.Tensor) -> list[torch.Tensor]:
    rows = []
    for i in range(10):  # LOOP-VIA-HELPER
        rows.append(pick(x, i))
    return rows


def via_two_helpers(x: torch.Tensor) -> list[torch.Tensor]:
    return [pick_twice_removed(x, i) for i in range(7)]  # LOOP-VIA-TWO


def helpers_step(x: torch.Tensor) -> torch.Tensor:
    return torch.stack(via_helper(x) + via_two_helpers(x)).sum()


def user_training_loop(x: torch.Tensor, steps: int, on_step) -> None:  # type: ignore[no-untyped-def]
    for s in range(steps):  # LOOP-TRAINING
        y = helpers_step(x)
        y.add_(1)
        on_step(s)
