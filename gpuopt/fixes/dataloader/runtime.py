"""The dataloader fix's run-time form: a DataLoader built at one of the recorded sites (the user's
line that calls ``DataLoader(...)``, found as the DataLoader probe finds it) gets the recorded
``num_workers`` / ``persistent_workers`` / ``prefetch_factor`` / ``pin_memory`` (and
``batch_size``: the batch-size fix) in place of its own, and where the plan gave one, the
training's intra-op threads (``torch.set_num_threads``) as it is built; every other DataLoader is
left as it is."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Any

from gpuopt.debug import logger
from gpuopt.fixes.applied import Applied
from gpuopt.model.optimize import LoaderSettings

log = logger(__name__)


def patch_loaders(loaders: list[LoaderSettings], roots: list[Path], applied: Applied) -> None:
    from torch.utils.data import DataLoader

    from gpuopt.sites import SiteResolver

    wanted = {s.site: s.knobs() for s in loaders}
    threads = {s.site: s.torch_threads for s in loaders if s.torch_threads is not None}
    resolver = SiteResolver(roots)
    orig = DataLoader.__init__
    signature = inspect.signature(orig)

    def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
        site = _caller_site(resolver)
        knobs = dict(wanted.get(site, {})) if site is not None else {}
        if site in threads:
            import torch

            torch.set_num_threads(threads[site])
        if knobs:
            bound = signature.bind(loader, *args, **kwargs)
            bound.arguments.update(knobs)
            if int(bound.arguments.get("num_workers", 0) or 0) == 0:
                bound.arguments.pop("persistent_workers", None)
                bound.arguments.pop("prefetch_factor", None)
            orig(*bound.args, **bound.kwargs)
            return
        orig(loader, *args, **kwargs)

    __init__.__wrapped__ = orig  # type: ignore[attr-defined]
    DataLoader.__init__ = __init__  # type: ignore[method-assign,assignment]
    applied.notes.append(
        "DataLoader settings: "
        + "; ".join(f"{site} {_knob_text(k)}" for site, k in sorted(wanted.items()))
    )
    applied.notes += [f"torch.set_num_threads({n}) at {s}" for s, n in sorted(threads.items())]

    def undo() -> None:
        DataLoader.__init__ = orig  # type: ignore[method-assign]

    applied.on_undo(undo)


def _caller_site(resolver: Any) -> str | None:
    """The user's line that called ``DataLoader(...)`` (None: not the user's, or not found)."""
    try:
        user, _, _ = resolver.locate(sys._getframe(2))
        if user is None:
            return None
        return str(resolver.site(user.f_code, user.f_lasti))
    except Exception as exc:  # a patch must never break the user's DataLoader
        log.debug("a DataLoader's fixed settings not found: %s", exc, exc_info=True)
        return None


def _knob_text(knobs: dict[str, int | bool]) -> str:
    return ", ".join(f"{k}={v}" for k, v in knobs.items())


__all__ = ["patch_loaders"]
