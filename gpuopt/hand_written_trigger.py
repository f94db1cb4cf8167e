"""The words every hand-written op chain (:mod:`gpuopt.fixes.fused_ops`) calls
one of: a line without any holds none. Apart from the codemod so that a profile's end reads a
script's lines without importing libcst (0.35 s here) when no line could hold a chain."""

from __future__ import annotations

import re
from collections.abc import Collection

# every pattern calls one of these: a module without any is not parsed (parsing costs ~40 µs a
# line, and profiling scans every user file that issued ops)
TRIGGER = re.compile(r"\btanh\b|\berf\b|\bexp\b|softmax|\bvar\b")


def trigger_lines(text_lines: list[str], lines: Collection[int]) -> set[int]:
    """The 1-based ``lines`` of ``text_lines`` that hold a trigger word."""
    return {ln for ln in lines if 0 < ln <= len(text_lines) and TRIGGER.search(text_lines[ln - 1])}
