"""Taking one of gpuopt's torch function modes off the stack wherever it sits.

A mode pushed later than ours (the user's, or another gpuopt probe's: the recorder's window opens
at a step boundary while the memory probe's program recorder is still on) sits above it, and
``mode.__exit__`` would pop *that* one. Left on the stack, an inert mode still costs a Python call
per torch call for the rest of the run (the memory recorder's cost 1.3 ms a step on an H200 step
of 268 ops, a 1.35x overhead, until this). So ours is removed from the middle: the modes above it
are popped and pushed back in their order, as ``TorchFunctionMode.__enter__``/``__exit__`` do
(``_push_mode``/``_pop_mode``, nothing else): whoever pushed them still finds them where they were.
"""

from __future__ import annotations

from typing import Any

from gpuopt import torch_compat


def remove_function_mode(mode: Any) -> bool:
    """Take ``mode`` off torch's function-mode stack; False when it is not on it."""
    stack = torch_compat.function_mode_stack()
    if not any(m is mode for m in stack):
        return False
    above: list[Any] = []
    while True:
        top = torch_compat.pop_function_mode()
        if top is mode:
            break
        above.append(top)
    for m in reversed(above):
        torch_compat.push_function_mode(m)
    return True
