"""gpuopt's function mode leaves torch's stack from wherever it sits, the others kept in order."""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack

from gpuopt.torch_modes import remove_function_mode


class Counting(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.calls += 1
        return func(*args, **(kwargs or {}))


def test_a_mode_under_two_others_leaves_and_they_stay_in_order() -> None:
    ours, a, b = Counting(), Counting(), Counting()
    ours.__enter__()
    a.__enter__()
    b.__enter__()
    try:
        assert remove_function_mode(ours)
        assert _get_current_function_mode_stack() == [a, b]
        torch.ones(2).add(1)
        assert ours.calls == 0 and a.calls > 0 and b.calls > 0
        assert not remove_function_mode(ours)  # already off: nothing popped
        assert _get_current_function_mode_stack() == [a, b]
    finally:
        b.__exit__(None, None, None)  # their owners' exits pop their own modes
        a.__exit__(None, None, None)
    assert _get_current_function_mode_stack() == []


def test_a_mode_on_top_leaves_as_its_exit_would() -> None:
    below, ours = Counting(), Counting()
    below.__enter__()
    ours.__enter__()
    try:
        assert remove_function_mode(ours)
        assert _get_current_function_mode_stack() == [below]
    finally:
        below.__exit__(None, None, None)
    assert _get_current_function_mode_stack() == []
