"""Time named right: time in the step that issues no tensor op — a sleep, a blocking
read, a pure-Python loop — is "other", named at its line by the gap sampler, and never dispatch:
launch-bound does not take it (it once reported a 10 ms sleep as 54.7% of HIGH launch-bound, at
the next op's line)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch
from probes_support import ROOT, load, record, site

from gpuopt.findings.engine import evaluate
from gpuopt.model.profile import Profile
from gpuopt.probes.gap_sampler import GapSampler, recorder_codes
from gpuopt.probes.recorder import DispatchRecorder
from gpuopt.probes.recorder_engine import RecorderEngine
from gpuopt.probes.recorder_snapshot import StepSnapshot

FILE = "planted_outside.py"


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def _run(step: Any, tmp_path: Path, walls: list[float] | None = None) -> dict[str, Any]:
    """Five steps of ``step``, steps 1-3 in the recorder's window; ``walls``, when given, gets
    how long each call of ``step`` took (not the recorder's work at the step boundaries)."""
    x = torch.randn(16)

    def one(i: int) -> None:
        t0 = time.perf_counter()
        step(x)
        if walls is not None:
            walls.append(time.perf_counter() - t0)

    return record(one, steps=5, tmp_path=tmp_path, window_start=1, window_steps=3)


def _named_run(step: Any, tmp_path: Path, marker: str) -> None:
    walls: list[float] = []
    doc = _run(step, tmp_path, walls)
    # each window step's own length: a loaded machine makes steps unlike each other
    walls_us = [w * 1e6 for w in walls[1:4]]
    _named(doc, marker, walls_us)


def _named(doc: dict[str, Any], marker: str, walls_us: list[float]) -> None:
    d = doc["dispatch"]
    sites = d["outside_ops_sites"]
    # most of the step issues no op, and it is found at the planted line
    assert d["outside_ops_share"] >= 0.4, d
    assert sites[0]["site"] == site(FILE, marker), sites
    assert sites[0]["time_share"] >= 0.3, sites
    # ... in every window step (``gpuopt check`` reads the steps' median)
    steps = d["outside_ops_named_us_steps"]
    assert len(steps) == d["window_steps"] == 3, d
    assert all(n >= 0.3 * w for n, w in zip(steps, walls_us, strict=True)), (steps, walls_us)
    # ... and it is not dispatch: the dispatch share leaves it out, launch-bound stays silent
    assert d["host_dispatch_share"] < 0.3, d  # launch-bound's threshold
    profile = msgspec.convert(doc, Profile)
    assert [f for f in evaluate(profile) if f.id == "launch-bound"] == []


def test_a_sleep_is_other_at_its_line(tmp_path: Path) -> None:
    mod = load(FILE)
    _named_run(lambda x: mod["with_sleep"](x, 0.03), tmp_path, "SLEEP")


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_a_blocking_read_is_other_at_its_line(tmp_path: Path) -> None:
    mod = load(FILE)
    blob = tmp_path / "blob.bin"
    blob.write_bytes(os.urandom(1 << 20) * 48)  # 48 MiB: its read takes milliseconds
    _named_run(lambda x: mod["with_read"](x, str(blob)), tmp_path, "READ")


@pytest.mark.slow  # seconds of CPU: out of make test-fast
def test_a_pure_python_loop_is_other_at_its_line(tmp_path: Path) -> None:
    mod = load(FILE)
    _named_run(lambda x: mod["with_loop"](x, 400_000), tmp_path, "LOOP")


def test_tiny_ops_alone_have_no_time_outside_ops(tmp_path: Path) -> None:
    mod = load(FILE)
    d = _run(mod["tiny_ops"], tmp_path)["dispatch"]
    # A busy machine's preemptions are long stretches without ops too (not dispatch either),
    # but the sampler cannot look into them (the descheduled thread holds the GIL): no line of
    # the step is named for them.
    named = sum(s["time_share"] for s in d.get("outside_ops_sites", []))
    assert named < 0.2, d
    assert len(d["host_dispatch_share_steps"]) == 3


class _Engine:
    """What the sampler reads of the recorder's engine."""

    recording = True
    busy = False
    last_exit = 0.0
    steps_done = 0


def test_the_sampler_skips_ops_short_stretches_and_the_recorder() -> None:
    engine = _Engine()
    sampler = GapSampler(engine, recorder_codes(RecorderEngine, DispatchRecorder))
    sampler.start()  # samples this thread; looked at by hand below
    sampler.stop()
    assert sampler.look(now=1.0, last=0.99) is not None  # 1 s after the last op: kept
    s = sampler.samples[-1]
    assert s.seconds == pytest.approx(0.01) and s.age == pytest.approx(1.0)
    here = test_the_sampler_skips_ops_short_stretches_and_the_recorder.__code__
    innermost = [sampler.codes[c] for c, _ in s.stack[:2]]
    assert innermost == [GapSampler.look.__code__, here]  # innermost first
    again = [sampler.look(now=1.0 + i / 1e3, last=0.99) for i in range(2)]
    assert again[0] is not None and again[1] is not None
    assert again[0].stack is again[1].stack  # the same stack seen again: one tuple
    engine.last_exit = 0.99995  # 50 µs after an op: issuing the next one
    assert sampler.look(now=1.0, last=0.99) is None
    engine.last_exit, engine.busy = 0.0, True  # in the recorder's handler
    assert sampler.look(now=1.0, last=0.99) is None
    engine.busy, engine.recording = False, False  # window off
    assert sampler.look(now=1.0, last=0.99) is None


def test_a_sample_carries_when_its_stretch_began() -> None:
    engine = _Engine()
    engine.last_exit = 0.5
    sampler = GapSampler(engine, frozenset())
    sampler.start()
    sampler.stop()
    sample = sampler.look(now=1.0, last=0.99)
    assert sample is not None and sample.since == 0.5 and sample.age == pytest.approx(0.5)


def test_a_stretch_the_sampler_looked_into_is_named_for_its_measured_length() -> None:
    """Looks every millisecond miss a stretch's start and the tail after the last look: a 1.7 ms
    sleep planted in examples/index_loops.py was named for a third of it (6pt of a 17% sleep),
    and gpuopt check passed it. Where the recorder measured the stretch, its samples are
    scaled up to its length; never down, and a stretch it did not measure keeps their time."""
    from gpuopt.assemble.host_summary import _stretch_scale
    from gpuopt.probes.gap_sampler import GapSample

    def at(since: float, seconds: float) -> GapSample:
        return GapSample(step=0, seconds=seconds, age=0.001, stack=(), since=since)

    samples = [at(1.0, 0.0004), at(1.0, 0.0002), at(2.0, 0.001), at(3.0, 0.002)]
    lengths = {1.0: 0.0018, 2.0: 0.0005, 5.0: 0.004}
    assert _stretch_scale(samples, lengths) == {1.0: pytest.approx(3.0), 2.0: 1.0}


def test_recorder_codes_cover_the_modes_and_the_sync_wrapper() -> None:
    codes = recorder_codes(RecorderEngine)
    assert id(RecorderEngine.on_dispatch.__code__) in codes
    assert id(RecorderEngine.on_function.__code__) in codes
    engine = RecorderEngine.__new__(RecorderEngine)
    wrapper = RecorderEngine._sync_wrapper(engine, lambda: None, "x")
    assert id(wrapper.__code__) in codes


def test_gpuopt_profile_names_a_sleep_in_the_step_other_at_its_line(tmp_path: Path) -> None:
    """A sleep through the whole pipeline: a 20 ms sleep in a step of ~200 small ops."""
    import json

    from conftest import SCRIPTS, marker_site, run_gpuopt

    script = SCRIPTS / "tiny_ops_sleep.py"
    r = run_gpuopt("profile", "--quiet", "-o", str(tmp_path / "run"), str(script), timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "run" / "profile.json").read_text())
    d = doc["dispatch"]
    assert d["outside_ops_sites"][0]["site"] == marker_site(script, "SLEEP")
    assert d["outside_ops_share"] >= 0.4 and doc["breakdown"]["other"] >= 0.4
    assert "launch-bound" not in [f["id"] for f in doc["findings"]]
    report = run_gpuopt("report", str(tmp_path / "run"))
    assert "Time outside tensor ops" in report.stdout


def test_a_stretch_the_sampler_saw_in_one_step_is_named_in_every_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench_check: a 1.5 ms sleep planted after every step of index_loops is seen in
    one window step of three in 3 of 20 runs, a third of it by the steps' samples. The stretch after
    as many ops in a step of as many ops is the same code: named in every step for its measured
    length. Here the sampler stops after its first sample."""
    from gpuopt.probes import gap_sampler

    monkeypatch.setattr(gap_sampler, "MAX_SAMPLES", 1)
    mod = load(FILE)
    d = _run(lambda x: mod["with_sleep"](x, 0.03), tmp_path)["dispatch"]
    top = d["outside_ops_sites"][0]
    assert top["samples"] == 1 and top["site"] == site(FILE, "SLEEP"), top
    steps = d["outside_ops_named_us_steps"]
    assert len(steps) == 3 and min(steps) >= 25_000, steps  # each step's 30 ms sleep


def _step(ops: int, gaps: dict[float, tuple[float, int]]) -> StepSnapshot:
    """A window step of ``ops`` model ops, its stretches by start: ``(seconds, ops before)``."""
    return StepSnapshot(
        ops=ops,
        gaps={start: length for start, (length, _) in gaps.items()},
        gap_ops={start: before for start, (_, before) in gaps.items()},
    )


def test_the_same_stretch_is_one_at_the_same_place_in_a_step_of_as_many_ops() -> None:
    """A stall in one step (a collection, the process descheduled) sits where the other steps
    have no long stretch and stays in its step; a step with another number of ops (a ragged
    batch) is not matched; a stretch short enough to be dispatch is not named."""
    from gpuopt.assemble.stretches import same_stretches, stretches

    found = stretches(
        [
            _step(10, {1.0: (0.0015, 0), 1.5: (0.030, 4)}),  # the sleep, seen; a stall, seen
            _step(10, {2.0: (0.0016, 0), 2.3: (0.0001, 4)}),  # the sleep; a short stretch
            _step(12, {3.0: (0.0015, 0)}),  # another number of ops
            _step(10, {4.0: (0.0014, 0)}),
        ]
    )
    named = {1.0: ("train.py:9", "train.py:9"), 1.5: ("train.py:5", "train.py:5")}
    got = sorted(same_stretches(found, named, bound_s=0.0005))
    assert got == [
        (("train.py:9", "train.py:9"), 1, 0.0016, 2.0),
        (("train.py:9", "train.py:9"), 3, 0.0014, 4.0),
    ]


def test_stalls_each_at_their_own_place_are_named_but_not_compared(tmp_path: Path) -> None:
    """bench_check: in an identical index_loops run the machine slows, the sampler names
    1-4 ms stalls inside the loops, each at its own place, in two window steps of three; counted,
    the steps' median reads 12.3% of the step and ``gpuopt check`` would fail the pair. The report
    still names the time at its line; the steps the gate compares keep only stretches that
    recur at their place."""
    mod = load(FILE)
    x = torch.randn(16)
    doc = record(
        lambda i: mod["with_stall"](x, 0.03, i),
        steps=5,
        tmp_path=tmp_path,
        window_start=1,
        window_steps=3,
    )
    d = doc["dispatch"]
    assert d["outside_ops_sites"][0]["site"] == site(FILE, "STALL"), d["outside_ops_sites"]
    steps = d["outside_ops_named_us_steps"]
    assert len(steps) == 3 and max(steps) < 0.1 * d["step_time_us"], (steps, d["step_time_us"])


def test_a_stretch_recurs_at_its_place_in_most_steps_of_as_many_ops() -> None:
    from gpuopt.assemble.stretches import recurring, stretches

    three = stretches(
        [
            _step(10, {1.0: (0.002, 0), 1.4: (0.003, 4), 1.5: (0.001, 5)}),
            _step(10, {2.0: (0.002, 0), 2.7: (0.003, 7), 2.8: (0.0001, 5)}),
            _step(10, {3.0: (0.002, 0), 3.5: (0.001, 5)}),
            _step(12, {4.0: (0.004, 3)}),  # its number of ops alone: cannot be told apart
        ]
    )
    # the sleep in every step, the stretch in two steps of three; not the stalls at 4 and 7 ops,
    # nor a stretch too short to count (2.8)
    assert recurring(three, 0.0005) == {1.0, 2.0, 3.0, 1.5, 3.5, 4.0}
    four = stretches([_step(10, {float(i): (0.002, 2 if i < 2 else 5 + i)}) for i in range(4)])
    assert recurring(four, 0.0005) == set()  # two steps of four: not most of them


def test_a_stall_does_not_recur_by_a_hiccup_at_its_place() -> None:
    """A loaded fresh-clone CI: a 30 ms stall in one window step and a 0.13 ms stretch at the same
    place in another made the stall recur (2 steps of 3) and the gate's steps read 30 ms. A
    stretch recurs where the others at its place are at least half as long."""
    from gpuopt.assemble.stretches import recurring, stretches

    found = stretches(
        [
            _step(10, {1.0: (0.002, 0)}),
            _step(10, {2.0: (0.002, 0), 2.5: (0.030, 7)}),  # the stall
            _step(10, {3.0: (0.002, 0), 3.5: (0.00013, 7)}),  # a hiccup at its place
        ]
    )
    assert recurring(found, 0.0001) == {1.0, 2.0, 3.0, 3.5}
