"""The floating-point operations of a replayed step: a dispatch mode that adds up what
``torch.utils.flop_counter``'s formulas give for each op they know (matmuls, convolutions,
attention; elementwise ops count nothing), over fake tensors as over real ones. Used for
``memory.predicted.step_flops``: how long the step's math takes on the named GPU."""

from __future__ import annotations

import sys
from typing import Any

from gpuopt.debug import logger

log = logger(__name__)


def flop_mode() -> Any:
    """A TorchDispatchMode whose ``flops`` is the FLOPs of the ops run inside it so far."""
    from torch.utils.flop_counter import flop_registry

    from gpuopt.torch_compat import TorchDispatchMode

    class _Flops(TorchDispatchMode):  # type: ignore[no-untyped-call]
        flops = 0

        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return "torch._dynamo" in sys.modules

        @classmethod
        def ignore_compile_internals(cls) -> bool:
            return True  # as the memory tracker's mode (gpuopt/memory/tracker.py)

        def __torch_dispatch__(
            self,
            func: Any,
            types: Any,
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            formula = flop_registry.get(getattr(func, "_overloadpacket", None))
            if formula is not None:
                try:
                    self.flops += int(formula(*args, **kwargs, out_val=out))
                except Exception as exc:  # a formula that does not fit these arguments
                    log.debug_once("FLOPs of %s not counted: %s", func, exc)
            return out

    return _Flops()  # type: ignore[no-untyped-call]
