"""``--format json``: the profile document itself, for scripts and dashboards.

The output must load back with :func:`gpuopt.schema.load_profile` and be byte-identical for the
same document, so CI jobs can diff two renderings. Keys keep the contract's order (the order of
``CONTRACT.md``, which is also how ``profile.json`` is written) with gpuopt's additional keys
after it in the order the document has them; nothing is sorted or dropped. Non-finite numbers
become ``null`` (strict JSON has no NaN), and anything that is not JSON data (tuples, non-string
keys, numbers too large for a 64-bit integer) is written the way JSON can hold it.
"""

from __future__ import annotations

import math
from typing import Any

from gpuopt.report.base import Renderer
from gpuopt.schema import REQUIRED_KEYS


def _clean(value: Any) -> Any:
    """Plain JSON data: NaN/inf → None, tuples → lists, keys → str; other objects → str."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return str(value)


def ordered(doc: dict[str, Any]) -> dict[str, Any]:
    """The contract's keys first, in the contract's order; every other key after them."""
    out = {k: doc[k] for k in REQUIRED_KEYS if k in doc}
    out.update((k, v) for k, v in doc.items() if k not in out)
    return out


class JsonRenderer(Renderer):
    name = "json"

    def render(self, doc: dict[str, Any]) -> str:
        import orjson

        try:
            # orjson: ~10x faster on long runs, and it already writes NaN/inf as null
            data = orjson.dumps(ordered(doc), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
            return data.decode("utf-8") + "\n"
        except (TypeError, orjson.JSONEncodeError):
            # what orjson refuses (integers beyond 64 bits, unknown objects) goes the slow way
            import json

            cleaned = _clean(ordered(doc))
            return json.dumps(cleaned, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
