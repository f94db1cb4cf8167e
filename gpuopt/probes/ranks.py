"""Whether this process is one rank of several, from torchrun's environment: read at every
profile's start, without importing the collectives probe a single process never uses."""

from __future__ import annotations

import os

from gpuopt.debug import logger

log = logger(__name__)


def env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        log.debug("%s=%r is not an integer: taken as unset", name, value)
        return None


def wanted() -> bool:
    """Whether this process is one rank of several (torchrun's environment says so)."""
    return (env_int("WORLD_SIZE") or 1) > 1
