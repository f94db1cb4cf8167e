"""The enclosing ops of events (:func:`gpuopt.trace.cpu_ops.enclosing_chains`): the scan it takes
for few events gives what the range-maximum walk gives, on nested and on overlapping ops."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from gpuopt.trace import cpu_ops


def _view(ts: np.ndarray, dur: np.ndarray) -> Any:
    return SimpleNamespace(ts=ts, dur=dur, end=ts + dur)


def _ops(v: Any) -> cpu_ops.ThreadOps:
    return cpu_ops._thread_ops(v, np.ones(v.ts.size, dtype=bool))


def _case(rng: np.random.Generator, n: int, nan_share: float) -> Any:
    """Ops that mostly nest (children inside a parent's span), some overlapping their parent's
    end, some with a NaN start or end; a few top-level ones."""
    ts = np.empty(n)
    dur = np.empty(n)
    ts[0], dur[0] = 0.0, 1000.0
    roots = [0]  # top-level ops: a new one now and then, after everything before it
    for k in range(1, n):
        if rng.random() < 0.02:
            roots.append(k)
            ts[k], dur[k] = np.nanmax(ts[:k] + dur[:k]) + 1.0, 1000.0
            continue
        p = int(rng.integers(roots[-1], k))
        start = ts[p] + rng.uniform(0, max(dur[p], 1.0))
        ts[k] = np.round(start) if rng.random() < 0.3 else start  # ties on rounded starts
        left = max(ts[p] + dur[p] - ts[k], 0.0)
        dur[k] = rng.uniform(0, left) if rng.random() < 0.9 else rng.uniform(0, 2 * left + 5)
    ts[rng.random(n) < nan_share] = np.nan
    dur[rng.random(n) < nan_share] = np.nan
    return _view(ts, dur)


@pytest.mark.parametrize("seed", range(70))
def test_the_scan_finds_what_the_walk_finds(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400)) if seed < 60 else int(rng.integers(2000, 6000))  # table levels
    v = _case(rng, n, 0.05 if seed % 3 == 0 else 0.0)
    events = rng.integers(0, v.ts.size, size=int(rng.integers(1, 40 if seed < 60 else 200)))
    scanned = cpu_ops.enclosing_chains(v, _ops(v), events)
    monkeypatch.setattr(cpu_ops, "SCAN_MAX_EVENTS", -1)  # the walk, always
    walked = cpu_ops.enclosing_chains(v, _ops(v), events)
    assert scanned == walked


def test_the_scan_is_taken_for_few_events_only() -> None:
    v = _case(np.random.default_rng(1), 300, 0.0)
    ops = _ops(v)
    few = np.arange(10)
    many = np.arange(cpu_ops.SCAN_MAX_EVENTS + 1) % v.ts.size
    assert cpu_ops.enclosing_chains(v, ops, few)  # some event has an enclosing op
    assert not ops.end_max  # found by scanning: the walk's table never built
    cpu_ops.enclosing_chains(v, ops, many)
    assert ops.end_max  # the walk


def test_an_event_inside_nested_ops_gets_them_outermost_first() -> None:
    v = _view(np.array([0.0, 10.0, 20.0, 30.0, 500.0]), np.array([100.0, 80.0, 5.0, 1.0, 1.0]))
    # event 3 (30-31) lies in ops 0 and 1, not in op 2 (20-25); event 4 in none
    assert cpu_ops.enclosing_chains(v, _ops(v), np.array([3, 4, 0])) == [[0, 1], [], []]


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("walk", [False, True])
def test_the_innermost_site_is_the_chains_innermost_op_with_one(
    seed: int, walk: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(seed)
    v = _case(rng, int(rng.integers(1, 400)), 0.05 if seed % 3 == 0 else 0.0)
    events = rng.integers(0, v.ts.size, size=int(rng.integers(1, 40)))
    with_site = set(rng.choice(v.ts.size, size=v.ts.size // 4).tolist())

    def site(j: int) -> str | None:
        return f"f.py:{j}" if j in with_site else None

    chains = cpu_ops.enclosing_chains(v, _ops(v), events)
    expected = [next((site(j) for j in reversed(c) if site(j)), None) for c in chains]
    if walk:
        monkeypatch.setattr(cpu_ops, "SCAN_MAX_EVENTS", -1)
    assert cpu_ops._innermost_sites(v, _ops(v), events, site) == expected
