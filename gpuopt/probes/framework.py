"""The framework probe: which training framework the steps run through (the HF ``Trainer``,
accelerate ...), read from the stack at the first step boundaries (docs/frameworks.md).

At a step boundary the stack runs from the user's line into the framework's loop and down to
``optimizer.step``; :func:`gpuopt.frameworks.detect.seen_on_stack` finds the outermost
framework frame and the user's line that called it. The first :data:`LOOK_STEPS` boundaries are
read and the last that saw a framework wins (the first steps of a loop may be marked by its
backward, ``accelerator.backward(loss)``, before its ``optimizer.step()`` marks them); then the
probe asks for no more boundaries.
"""

from __future__ import annotations

import sys
from typing import Any

from gpuopt.debug import logger
from gpuopt.frameworks.detect import FrameworkCapture
from gpuopt.probes.protocol import DONE, RunContext

log = logger(__name__)

LOOK_STEPS = 3  # step boundaries looked at before a run counts as a plain loop


class FrameworkProbe:
    name = "framework"

    def __init__(self) -> None:
        self.seen: FrameworkCapture | None = None
        self.looks = 0
        self.errors: list[str] = []
        self._resolver: Any = None
        self._main: Any = None  # the script's module, as sys.modules held it at a step

    def start(self, ctx: RunContext) -> None:
        from gpuopt.sites import SiteResolver

        self._resolver = SiteResolver(ctx.user_roots)

    def on_step(self, index: int, t: float) -> str | None:
        if self.looks >= LOOK_STEPS or self._resolver is None:
            return DONE  # no more boundaries: the step clock stops calling
        self.looks += 1
        self._main = sys.modules.get("__main__")
        try:
            self._look(sys._getframe(1))
        except Exception as exc:  # measuring must never break the user's run
            log.debug("probe framework: gave up", exc_info=True)
            self.errors.append(f"framework probe: {type(exc).__name__}: {exc}")
            self.looks = LOOK_STEPS
        return None

    def _look(self, frame: Any) -> None:
        from gpuopt.frameworks.detect import (
            FrameworkFiles,
            seen_on_stack,
            settings_sites,
            version_of,
        )

        resolver = self._resolver
        seen = seen_on_stack(
            frame,
            FrameworkFiles(),
            resolver.is_user_file,
            lambda f: resolver.site(f.f_code, f.f_lasti),
        )
        if seen is None:
            return
        if self.seen is not None and self.seen.name == seen.spec.name:
            self.seen.entry, self.seen.function = seen.entry, seen.function
            return
        calls = {k.call for k in seen.spec.knobs}
        self.seen = FrameworkCapture(
            name=seen.spec.name,
            version=version_of(seen.spec),
            entry=seen.entry,
            function=seen.function,
            settings_at=settings_sites(seen.user_files, calls, resolver.relfile),
        )

    def stop(self) -> None:
        pass

    def result(self) -> FrameworkCapture | None:
        """What the stack showed; else the framework the run imported, where a spec recognises
        it from ``sys.modules`` (a framework's script that steps its optimizer itself), with the
        script's module as ``__main__`` (the run has put gpuopt's own back by now)."""
        if self.seen is not None:
            return self.seen
        from collections import ChainMap

        from gpuopt.frameworks.detect import recognised

        main: dict[str, Any] = {"__main__": self._main} if self._main is not None else {}
        try:
            return recognised(ChainMap(main, sys.modules))
        except Exception as exc:  # a spec that misbehaves costs the key, never the run
            log.debug("probe framework: not recognised", exc_info=True)
            self.errors.append(f"framework probe: {type(exc).__name__}: {exc}")
            return None
