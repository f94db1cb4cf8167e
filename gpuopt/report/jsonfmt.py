"""``--format json``: the profile document itself, for scripts and dashboards.

Written by the document's one encoder (:func:`gpuopt.model.document.encode`), so it is exactly
what ``profile.json`` holds: it loads back with :func:`gpuopt.model.document.load_profile`, is
byte-identical for the same document (CI jobs can diff two renderings), and keeps the contract's
key order (the model's field order is the contract's, gpuopt's additions after it). Keys only
some documents carry are left out where the document does not have them; non-finite numbers
become ``null`` (strict JSON has no NaN).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuopt.report.renderer import Renderer

if TYPE_CHECKING:
    from gpuopt.model.profile import Profile


class JsonRenderer(Renderer):
    name = "json"

    def render(self, profile: Profile) -> str:
        from gpuopt.model.document import encode

        return encode(profile).decode("utf-8") + "\n"
