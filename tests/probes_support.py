"""Helpers for the recorder tests: run planted code under the probe, find marked lines.

The recorder is driven directly in-process, as the runner drives it: start → N steps, each ending
with ``on_step`` → stop → result, summarised as the assembly does. Expected lines come from
``# MARKER`` comments in the
planted files, so the assertions are exact without hard-coding line numbers.
"""

from __future__ import annotations

import re
import runpy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from gpuopt.assemble.host_summary import summarize
from gpuopt.model.profile import Profile, StepRecord
from gpuopt.probes.protocol import RunContext
from gpuopt.probes.recorder import DispatchRecorder

ROOT = Path(__file__).resolve().parents[1]
PLANTED = ROOT / "tests" / "data" / "probes"


def load(name: str) -> dict[str, Any]:
    """The globals of a planted script (run as a module, so its functions keep its file name)."""
    return runpy.run_path(str(PLANTED / name))


def line_of(name: str, marker: str) -> int:
    """The line number of the one line carrying ``# <marker>`` in a planted file."""
    pattern = re.compile(rf"# {re.escape(marker)}(\s|$)")
    hits = [
        i
        for i, text in enumerate((PLANTED / name).read_text().splitlines(), start=1)
        if pattern.search(text) and not text.lstrip().startswith("#")
    ]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times in {name}"
    return hits[0]


def site(name: str, marker: str) -> str:
    """The site string the recorder must report (tests run with the repository as cwd)."""
    return f"tests/data/probes/{name}:{line_of(name, marker)}"


def context(
    tmp_path: Path, window_start: int = 1, window_steps: int = 3, **extra: Any
) -> RunContext:
    return RunContext(
        script="planted",
        user_roots=[PLANTED],
        out_dir=tmp_path,
        warmup=window_start,
        window_start=window_start,
        window_steps=window_steps,
        extra=dict(extra),
    )


def record(
    step: Callable[[int], Any],
    steps: int,
    tmp_path: Path,
    window_start: int = 1,
    window_steps: int = 3,
    series: list[dict[str, Any]] | None = None,
    probe: DispatchRecorder | None = None,
) -> dict[str, Any]:
    """Run ``step(i)`` for ``steps`` steps under a fresh recorder; the document's host parts."""
    probe = probe or DispatchRecorder()
    probe.start(context(tmp_path, window_start, window_steps))
    try:
        for i in range(steps):
            step(i)
            probe.on_step(i, time.perf_counter())
    finally:
        probe.stop()
    return host_document(probe, series)


def host_document(
    probe: DispatchRecorder, series: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The profile parts a stopped recorder measured (``dispatch``, ``transfers``, ``syncs``,
    ``loops``, ``ragged``, ``warnings``), as plain data, the way they appear in profile.json.
    ``series``: the run's steps (``{index, time_s, data_wait_s, warmup}``), as the assembly
    passes them."""
    steps = [msgspec.convert({"start_s": None, **r}, StepRecord) for r in series or []]
    host = summarize(probe.result(), steps)
    profile = Profile(
        dispatch=host.dispatch,
        transfers=host.transfers,
        syncs=host.syncs,
        loops=host.loops,
        warnings=host.warnings,
    )
    if host.ragged is not None:
        profile.ragged = host.ragged
    return msgspec.to_builtins(profile)  # type: ignore[no-any-return]


def by_site(entries: list[dict[str, Any]], **match: Any) -> dict[str, dict[str, Any]]:
    """Entries keyed by site (only those matching ``match``), asserting one entry per site."""
    out: dict[str, dict[str, Any]] = {}
    for e in entries:
        if all(e.get(k) == v for k, v in match.items()):
            assert e["site"] not in out, f"two entries at {e['site']}: {out[e['site']]} and {e}"
            out[e["site"]] = e
    return out
