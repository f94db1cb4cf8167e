"""Property-based tests of the trace reader, with hypothesis.

* Random *valid* traces (CPU ops on one or two threads, launches of kernels, copies and sets on
  one to three streams, optional ProfilerStep annotations, µs or ns resolution, one rank or two)
  give a valid profile in which every share is in [0, 100], every fraction in [0, 1], and every
  time, count and size is >= 0 (:func:`trace_helpers.impossible_numbers`).
* Random *corruptions* of valid traces (truncation, byte flips, deleted fields, wrong types,
  duplicated events, negative values, NaN, deep nesting, garbage, gzip garbage) give either such a
  profile or a one-line :class:`GpuoptError`, never another exception.

Deterministic (``derandomize=True``: the same examples on every run, so CI is not flaky) and
fast (a few dozen examples each, about a second per test). For a long random search, set
``GPUOPT_PROPERTY_EXAMPLES`` (e.g. 2000): that many random examples per test, a new draw each run.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trace_helpers import copy, cpu, impossible_numbers, kernel, launch, write_trace

from gpuopt.errors import GpuoptError
from gpuopt.loading import load
from gpuopt.model.document import validate
from gpuopt.model.profile import Profile
from gpuopt.report import get_renderer

Events = list[dict[str, Any]]
_SEARCH = int(os.environ.get("GPUOPT_PROPERTY_EXAMPLES", "0") or 0)
SETTINGS = settings(
    max_examples=_SEARCH or 40,
    deadline=None,
    derandomize=not _SEARCH,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

HOST_OPS = ("aten::mm", "aten::add", "aten::item", "DataLoader.__next__", "Optimizer.step#SGD")
KERNELS = ("gemm", "elementwise", "ncclKernel_AllReduce_RING")
COPIES = (
    "Memcpy HtoD (Pageable -> Device)",
    "Memcpy HtoD (Pinned -> Device)",
    "Memcpy DtoH (Device -> Pinned)",
    "Memcpy DtoD (Device -> Device)",
)
LAUNCH_OF = {"kernel": "cudaLaunchKernel", "copy": "cudaMemcpyAsync", "set": "cudaMemsetAsync"}


@st.composite
def rank_events(draw: st.DrawFn, ns: bool, base: float) -> Events:
    """One rank's events, as a profiler records them: ops on the host, some launching work that
    runs on a stream after its launch and after the stream's previous work."""
    scale = 1000.0 if ns else 1.0  # ns resolution: times drawn in ns, written in µs

    def at(x: int) -> float:
        return base + x / scale

    streams = draw(st.lists(st.integers(0, 40), min_size=1, max_size=3, unique=True))
    free = dict.fromkeys(streams, 0)  # when each stream's last work ends
    host, corr, events = 0, 0, []
    for _ in range(draw(st.integers(1, 12))):
        host += draw(st.integers(0, int(50 * scale)))
        dur = draw(st.integers(int(scale), int(60 * scale)))
        tid = draw(st.sampled_from((100, 100, 101)))
        events.append(cpu(draw(st.sampled_from(HOST_OPS)), at(host), dur / scale, tid=tid))
        kind = draw(st.sampled_from(("none", "kernel", "kernel", "copy", "set", "sync")))
        if kind == "sync":
            events.append(cpu("cudaStreamSynchronize", at(host + 1), 1, "cuda_runtime", tid))
        elif kind != "none":
            corr += 1
            lts = host + draw(st.integers(0, dur // 2))
            ldur = draw(st.integers(0, int(10 * scale)))
            events.append(launch(at(lts), ldur / scale, corr, name=LAUNCH_OF[kind], tid=tid))
            s = draw(st.sampled_from(streams))
            start = max(lts + draw(st.integers(0, int(40 * scale))), free[s])
            gdur = draw(st.integers(0, int(120 * scale)))
            free[s] = start + gdur
            if kind == "kernel":
                name = draw(st.sampled_from(KERNELS))
                events.append(kernel(name, at(start), gdur / scale, corr, stream=s))
            else:
                name = draw(st.sampled_from(COPIES)) if kind == "copy" else "Memset (Device)"
                nbytes = draw(st.integers(0, 1 << 30))
                events.append(copy(name, at(start), gdur / scale, corr, stream=s, nbytes=nbytes))
        host += dur
    steps = draw(st.integers(0, 4))
    for k in range(steps):
        lo, hi = host * k // steps, host * (k + 1) // steps
        events.append(cpu(f"ProfilerStep#{k + 1}", at(lo), (hi - lo) / scale, "user_annotation"))
    return draw(st.permutations(events)) if draw(st.booleans()) else events


@st.composite
def valid_traces(draw: st.DrawFn) -> dict[str, Any]:
    """One trace file or a folder of two ranks: {"ranks": [events...], "indent", "gz"}."""
    ns = draw(st.booleans())
    base = draw(st.sampled_from((0.0, 1.7e15)))
    n_ranks = draw(st.sampled_from((1, 1, 1, 2)))
    return {
        "ranks": [draw(rank_events(ns, base)) for _ in range(n_ranks)],
        "indent": draw(st.sampled_from((2, None))),
        "gz": draw(st.booleans()),
    }


@contextmanager
def _folder() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="gpuopt-prop-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _write(folder: Path, trace: dict[str, Any]) -> Path:
    suffix = ".json.gz" if trace["gz"] else ".json"
    if len(trace["ranks"]) == 1:
        return write_trace(folder / f"t{suffix}", trace["ranks"][0], indent=trace["indent"])
    for r, events in enumerate(trace["ranks"]):
        write_trace(folder / f"r{r}{suffix}", events, rank=r, indent=trace["indent"])
    return folder


def _sound(profile: Profile) -> None:
    """The profile is valid, holds no impossible number, and every renderer draws it."""
    assert validate(profile) == []
    bad = impossible_numbers(msgspec.to_builtins(profile))
    assert bad == [], bad
    for fmt in ("text", "json"):
        assert get_renderer(fmt).render(profile)


@pytest.mark.slow
@SETTINGS
@given(valid_traces())
def test_valid_traces_give_possible_numbers(trace: dict[str, Any]) -> None:
    with _folder() as d:
        profile = load(_write(d, trace))
    _sound(profile)
    repairs = [w for w in profile.warnings if "dropped" in w or "start before" in w]
    assert repairs == []  # nothing to repair in a valid trace


# --------------------------------------------------------------------------- corruptions


Corruption = Callable[[random.Random, Events], "bytes | Events"]


def _pick(rng: random.Random, events: Events) -> dict[str, Any]:
    return events[rng.randrange(len(events))]


def _delete_field(rng: random.Random, events: Events) -> Events:
    e = _pick(rng, events)
    keys = [k for k in e if k != "args"] + [f"args.{k}" for k in e.get("args", {})]
    k = rng.choice(keys)
    if k.startswith("args."):
        del e["args"][k[5:]]
    else:
        del e[k]
    return events


_WRONG = ("soon", [1, 2], {"a": 1}, True, None, -7, 10**30, 1e300, "", "0x0", 3.5)


def _wrong_type(rng: random.Random, events: Events) -> Events:
    e = _pick(rng, events)
    k = rng.choice(("ph", "cat", "name", "ts", "dur", "pid", "tid", "args", "a.stream", "a.bytes"))
    if k.startswith("a."):
        e.setdefault("args", {})[k[2:]] = rng.choice(_WRONG)
    else:
        e[k] = rng.choice(_WRONG)
    return events


def _duplicate(rng: random.Random, events: Events) -> Events:
    if rng.random() < 0.5:
        return events * rng.randint(2, 3)
    return events + [dict(_pick(rng, events)) for _ in range(rng.randint(1, 5))]


def _negative(rng: random.Random, events: Events) -> Events:
    for _ in range(rng.randint(1, 4)):
        e = _pick(rng, events)
        key = rng.choice(("dur", "dur", "ts"))
        if isinstance(e.get(key), (int, float)):
            e[key] = -abs(e[key]) - rng.randint(0, 100)
    return events


def _text(events: Events) -> bytes:
    return json.dumps({"traceEvents": events}, indent=2).encode()


def _non_finite(rng: random.Random, events: Events) -> bytes:
    text = _text(events)
    key = rng.choice((b'"ts": ', b'"dur": '))
    at = text.find(key)
    if at < 0:
        return text
    end = at + len(key)
    stop = end
    while stop < len(text) and text[stop : stop + 1] in b"0123456789.e+-":
        stop += 1
    return text[:end] + rng.choice((b"NaN", b"Infinity", b"-Infinity", b"1e999")) + text[stop:]


def _nesting(rng: random.Random, events: Events) -> bytes:
    depth = rng.choice((1500, 20_000, 100_000))
    deep = b"[" * depth + b"]" * depth
    text = _text(events)
    spot = rng.choice((b'"args": {', b'"traceEvents": [', b"{"))
    at = text.find(spot)
    if spot == b"{":
        return b'{"x": ' + deep + b", " + text[1:]
    if spot == b'"args": {':
        return text[: at + len(spot)] + b'"deep": ' + deep + b", " + text[at + len(spot) :]
    return text[: at + len(spot)] + deep + b", " + text[at + len(spot) :]


def _truncate(rng: random.Random, events: Events) -> bytes:
    text = _text(events)
    return text[: rng.randrange(len(text))]


def _flip(rng: random.Random, events: Events) -> bytes:
    text = bytearray(_text(events))
    for _ in range(rng.randint(1, 6)):
        text[rng.randrange(len(text))] = rng.randrange(256)
    return bytes(text)


def _garbage(rng: random.Random, events: Events) -> bytes:
    junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 3000)))
    how = rng.choice(("alone", "after brace", "appended", "text"))
    if how == "alone":
        return junk
    if how == "after brace":
        return b"{" + junk
    if how == "appended":
        return _text(events) + junk
    return b"this is not a trace " * rng.randint(1, 50)


def _gzip_garbage(rng: random.Random, events: Events) -> bytes:
    packed = bytearray(gzip.compress(_text(events)))
    how = rng.choice(("flip", "cut", "magic", "binary"))
    if how == "flip":
        for _ in range(rng.randint(1, 4)):
            packed[rng.randrange(10, len(packed))] = rng.randrange(256)
        return bytes(packed)
    if how == "cut":
        return bytes(packed[: rng.randrange(2, len(packed))])
    if how == "magic":
        return b"\x1f\x8b" + bytes(rng.randrange(256) for _ in range(rng.randint(0, 500)))
    return gzip.compress(bytes(rng.randrange(256) for _ in range(rng.randint(1, 500))))


CORRUPTIONS: dict[str, Corruption] = {
    "truncate": _truncate,
    "flip": _flip,
    "delete_field": _delete_field,
    "wrong_type": _wrong_type,
    "duplicate": _duplicate,
    "negative": _negative,
    "non_finite": _non_finite,
    "nesting": _nesting,
    "garbage": _garbage,
    "gzip_garbage": _gzip_garbage,
}


@pytest.mark.slow  # seconds of CPU: out of make test-fast
@SETTINGS
@given(
    rank_events(ns=False, base=1.7e15),
    st.sampled_from(sorted(CORRUPTIONS)),
    st.randoms(use_true_random=False),
)
def test_corrupted_traces_give_a_profile_or_one_line_error(
    events: Events, how: str, rng: random.Random
) -> None:
    damaged = CORRUPTIONS[how](rng, json.loads(json.dumps(events)))
    with _folder() as d:
        p = d / ("t.json.gz" if how == "gzip_garbage" else "t.json")
        if isinstance(damaged, bytes):
            p.write_bytes(damaged)
        else:
            write_trace(p, damaged)
        try:
            profile = load(p)
        except GpuoptError as exc:
            msg = str(exc)
            assert msg and "\n" not in msg and str(p) in msg, msg
            return
    _sound(profile)


@pytest.mark.slow
@SETTINGS
@given(rank_events(ns=False, base=0.0), st.randoms(use_true_random=False))
def test_negative_kernel_durations_always_warn(events: Events, rng: random.Random) -> None:
    gpu = [e for e in events if "stream" in e["args"]]
    if not gpu:
        return
    e = rng.choice(gpu)
    e["dur"] = -1 - e["dur"]
    with _folder() as d:
        try:
            profile = load(write_trace(d / "t.json", events))
        except GpuoptError as exc:  # nothing left to analyse
            assert "negative duration" in str(exc)
            return
    _sound(profile)
    assert any("negative duration" in w for w in profile.warnings)


@pytest.mark.slow
@SETTINGS
@given(rank_events(ns=False, base=0.0), st.integers(2, 3))
def test_a_trace_repeated_gives_the_numbers_of_once(events: Events, times: int) -> None:
    with _folder() as d:
        once = load(write_trace(d / "once.json", events))
        again = load(write_trace(d / "again.json", events * times))
    _sound(again)
    assert again.gpu == once.gpu
    if any("correlation" in e["args"] for e in events):
        assert any("duplicate events" in w for w in again.warnings)
