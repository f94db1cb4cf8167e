"""Tests of features an older torch lacks: skipped there, with the reason gpuopt's report gives
(``gpuopt.torch_compat``'s labelled outcome, naming the feature and the torch version)."""

from __future__ import annotations

import pytest

from gpuopt import torch_compat


def needs(*keys: str) -> pytest.MarkDecorator:
    """Skip where the installed torch lacks any of ``keys``' names."""
    reasons = [r for k in keys if (r := torch_compat.check(k)) is not None]
    return pytest.mark.skipif(bool(reasons), reason="; ".join(reasons) or "all present")
