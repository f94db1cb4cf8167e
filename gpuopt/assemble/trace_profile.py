"""Bridge until the typed trace assembly lands: the dict-based builder in gpuopt.trace.profile,
through the document's JSON edge."""

from __future__ import annotations

from pathlib import Path

import msgspec
import orjson

from gpuopt.model.document import decode
from gpuopt.model.profile import Profile


def add_trace_to_profile(profile: Profile, path: Path) -> None:
    from gpuopt.trace.profile import add_trace_to_profile as add_to_dict

    doc = msgspec.to_builtins(profile)
    add_to_dict(doc, path)
    data = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    new = decode(data, str(path))
    for name in ("gpu", "trace", "tables", "warnings"):
        setattr(profile, name, getattr(new, name))
