"""The post-mortem of a run that died of ``torch.OutOfMemoryError`` (pure functions).

From the error: what it asked for, the device's capacity and what the allocator held in free
blocks (parsed from torch's message: "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of
79.15 GiB ... 1.2 GiB is reserved by PyTorch but unallocated"); the user's line it was raised at
(the innermost frame of the traceback in the user's code). What held the memory: on a GPU, the
caching allocator's snapshot at the failing allocation, its live blocks grouped by the user's line
that allocated them (recorded stacks); without one, the fake replay's split at that batch size
(an estimate, labelled so).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from gpuopt.model.records import MemoryByCategory, MemoryHolder

OOM_TYPES = ("OutOfMemoryError",)  # torch.OutOfMemoryError (torch.cuda.OutOfMemoryError)
HELD = 10  # holders listed

_UNIT = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
_SIZE = r"([\d.]+)\s*(B|KiB|MiB|GiB|TiB)"


def is_oom(error_type: str | None) -> bool:
    return error_type in OOM_TYPES


def _bytes(m: re.Match[str] | None) -> int | None:
    if m is None:
        return None
    return int(float(m.group(1)) * _UNIT[m.group(2)])


def parse_message(message: str) -> dict[str, int | None]:
    """``requested``, ``capacity``, ``reserved_unallocated`` bytes from torch's OOM message
    (None for what it does not say)."""
    text = " ".join(message.split())
    return {
        "requested": _bytes(re.search(r"Tried to allocate " + _SIZE, text)),
        "capacity": _bytes(re.search(r"total capacity of " + _SIZE, text)),
        "reserved_unallocated": _bytes(
            re.search(_SIZE + r" is reserved by PyTorch but unallocated", text)
        ),
    }


def user_site(
    frames: Iterable[tuple[str, int]], is_user: Callable[[str], bool], rel: Callable[[str], str]
) -> str | None:
    """The innermost frame of a traceback (outermost first, as ``traceback`` lists them) in the
    user's code, as ``path:line``."""
    site = None
    for filename, line in frames:
        if is_user(filename):
            site = f"{rel(filename)}:{line}"
    return site


def held_from_snapshot(
    snapshot: dict[str, Any], is_user: Callable[[str], bool], rel: Callable[[str], str]
) -> list[MemoryHolder]:
    """The allocator snapshot's live blocks, grouped by the user's line that allocated them
    (blocks allocated while no history was recorded, or from no user line, grouped as one)."""
    groups: dict[str | None, list[int]] = {}
    for seg in snapshot.get("segments", []) or []:
        for block in seg.get("blocks", []) or []:
            if block.get("state") != "active_allocated":
                continue
            site = None
            for fr in block.get("frames", []) or []:  # innermost first
                filename = str(fr.get("filename", ""))
                if is_user(filename):
                    site = f"{rel(filename)}:{fr.get('line')}"
                    break
            g = groups.setdefault(site, [0, 0])
            g[0] += int(block.get("requested_size") or block.get("size") or 0)
            g[1] += 1
    rows = sorted(groups.items(), key=lambda kv: (-kv[1][0], kv[0] or ""))
    return [
        MemoryHolder(site=site, module=None, bytes=n, count=c, category="allocated")
        for site, (n, c) in rows[:HELD]
    ]


def held_from_replay(split: MemoryByCategory, largest: list[MemoryHolder]) -> list[MemoryHolder]:
    """What the fake replay says held the memory at its peak: the model states as one holder
    each, then the largest groups of what the step made."""
    states = [
        MemoryHolder(site=None, module=None, bytes=n, category=k)
        for k, n in split.items()
        if k in ("parameters", "gradients", "optimizer_state") and n > 0
    ]
    rows = sorted([*states, *largest], key=lambda h: -h.bytes)
    return rows[:HELD]
