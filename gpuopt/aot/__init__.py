"""Ahead-of-time multi-stream scheduling (Nimble) for static models.

``gpuopt.aot.schedule(model, example_inputs)`` returns a module with the same outputs and a
``.plan`` (plain data). Importing this package does not import torch; ``schedule`` does.
See docs/aot.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["schedule"]


def schedule(model: Any, example_inputs: Any, **options: Any) -> Any:
    """Capture ``model``, assign its operators to streams (Nimble), return a ScheduledModule.

    See :func:`gpuopt.aot.api.schedule` for the options.
    """
    from gpuopt.aot.api import schedule as _schedule

    return _schedule(model, example_inputs, **options)
