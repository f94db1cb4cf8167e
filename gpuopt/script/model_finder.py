"""Which module is "the model": found while the script runs, without naming it.

Every outermost module call (a module called from outside any other module's forward) of a module
that has parameters is noted — each module once, with a copy of its latest inputs when asked (a
Dataset's transforms, called per sample, have none and are never noted); at an
``optimizer.step()`` the model is the noted module holding most of that optimizer's parameters (a
GAN's generator and discriminator each hold their own optimizer's).
"""

from __future__ import annotations

from typing import Any

MAX_MODULES = 64  # modules with parameters remembered (a run's first are enough)


class OutermostCalls:
    """Global module hooks that note outermost calls; :meth:`install` / :meth:`remove`."""

    def __init__(self, keep_inputs: bool = False) -> None:
        self.keep_inputs = keep_inputs
        self.depth = 0
        self.calls: dict[int, tuple[Any, tuple[Any, ...]]] = {}  # id(module) -> (it, inputs)
        self._handles: list[Any] = []

    def install(self) -> None:
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        self._handles = [
            register_module_forward_pre_hook(self._pre),
            register_module_forward_hook(self._post),
        ]

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()

    def _pre(self, module: Any, args: tuple[Any, ...]) -> None:
        if self.depth == 0 and next(module.parameters(), None) is not None:
            key = id(module)
            if key in self.calls or len(self.calls) < MAX_MODULES:
                self.calls[key] = (module, _copy(args) if self.keep_inputs else ())
        self.depth += 1

    def _post(self, module: Any, args: Any, output: Any) -> None:
        self.depth = max(self.depth - 1, 0)

    def model_for(self, optimizer: Any) -> tuple[Any, tuple[Any, ...]] | None:
        """The noted module holding most of ``optimizer``'s parameters, with its inputs."""
        params = {id(p) for g in optimizer.param_groups for p in g["params"]}
        best, best_n = None, 0
        for module, inputs in self.calls.values():
            n = sum(1 for p in module.parameters() if id(p) in params)
            if n > best_n:
                best, best_n = (module, inputs), n
        return best


def _copy(args: tuple[Any, ...]) -> tuple[Any, ...]:
    import torch

    return tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)
