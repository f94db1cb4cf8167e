"""``slow-steps``: a step many times the median, late or recurring, named by the stack samples
of the slow-step sampler (gpuopt.probes.slow_steps) and judged by its rule."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from gpuopt.findings.rules.slow_steps import slow_steps
from gpuopt.model.document import empty_profile
from gpuopt.model.profile import Profile
from gpuopt.model.records import SlowStep, StepRecord
from gpuopt.probes.protocol import RunContext
from gpuopt.probes.slow_steps import SlowStepSampler

HERE = Path(__file__).resolve().parent


def _run(times: dict[int, float], count: int = 60, warmup: int = 2, **slow: SlowStep) -> Profile:
    p = empty_profile("train.py")
    p.steps.series = [
        StepRecord(index=i, start_s=None, time_s=times.get(i, 0.1), warmup=i < warmup)
        for i in range(count)
    ]
    p.steps.slow = list(slow.values())
    return p


def test_a_slow_warm_up_step_alone_is_warm_up() -> None:
    assert slow_steps(_run({0: 5.0, 1: 3.0})) == []


def test_a_late_slow_step_is_named_with_its_cost() -> None:
    named = SlowStep(index=40, site="train.py:9", code="torch.save(m, p)", kind="checkpointing")
    (f,) = slow_steps(_run({40: 2.1}, s=named))
    assert f.id == "slow-steps" and f.site == "train.py:9"
    assert f.evidence["steps"] == [40] and f.evidence["kind"] == "checkpointing"
    assert f.evidence["excess_s"] == 2.0 and f.evidence["median_s"] == 0.1
    # of the loop's time: the steps after the first (the script's start-up)
    assert f.evidence["share"] == round(2.0 / (58 * 0.1 + 2.1), 4)
    assert "async_save" in f.fix and "torch.save(m, p)" in f.summary


def test_recurring_slow_steps_are_one_finding_with_their_period() -> None:
    times = {1: 3.0, 21: 3.0, 41: 3.0}
    named = {f"s{i}": SlowStep(index=i, site="t.py:5", kind="sampling") for i in times}
    (f,) = slow_steps(_run(times, **named))
    assert f.evidence["steps"] == [1, 21, 41] and f.evidence["every_steps"] == 20
    assert f.severity == "high"  # 8.7 s above the median of 14.4 s of steps


def test_steps_slow_at_the_usual_work_are_a_busy_machine() -> None:
    """Slow steps whose samples show only the usual steps' frames (a loaded machine) are no
    finding; a named step with work of its own is."""
    busy = {
        f"s{i}": SlowStep(index=i, site="t.py:3", samples=40, usual_samples=38) for i in (20, 30)
    }
    assert slow_steps(_run({20: 2.0, 30: 2.0}, **busy)) == []
    busy["s30"] = SlowStep(index=30, site="t.py:3", samples=40, usual_samples=2)
    (f,) = slow_steps(_run({20: 2.0, 30: 2.0}, **busy))
    assert f.evidence["steps"] == [20, 30]


def test_steps_a_probe_slowed_are_no_outliers() -> None:
    p = _run({2: 1.0, 3: 1.0})
    for r in p.steps.series[2:4]:
        r.instrumented = True
    assert slow_steps(p) == []


def generate(sampler: SlowStepSampler) -> None:
    sampler.look()


def _loop_body(sampler: SlowStepSampler, slow: bool) -> None:
    if slow:
        generate(sampler)  # the line the slow step is named by
    else:
        sampler.look()


def test_the_sampler_names_the_line_that_called_the_new_work(tmp_path: Path) -> None:
    """The usual steps' frames are known; a slow step's samples under ``generate`` are named by
    the line that called it, labelled sampling; a usual step keeps nothing."""
    import threading

    sampler = SlowStepSampler()
    sampler._tid = threading.get_ident()  # sampled from this thread, no sampling thread
    sampler._roots = [HERE]
    t = 0.0
    for index in range(30):
        slow = index == 20
        _loop_body(sampler, slow)
        t += 1.0 if slow else 0.1
        sampler.on_step(index, t)
    sampler.stop()
    (step,) = sampler.result()
    assert step.index == 20 and step.kind == "sampling" and step.samples == 1
    assert step.usual_samples == 0
    line = next(
        i
        for i, text in enumerate(Path(__file__).read_text().splitlines(), 1)
        if "# the line the slow step" in text
    )
    assert step.site is not None and step.site.endswith(f"test_slow_steps.py:{line}")
    assert step.code == "generate(sampler)  # the line the slow step is named by"


def test_a_run_without_slow_steps_names_nothing() -> None:
    sampler = SlowStepSampler()
    sampler.start(RunContext(script="x.py", user_roots=[HERE], out_dir=HERE))
    for index in range(10):
        sampler.on_step(index, 0.1 * (index + 1))
    sampler.stop()
    assert sampler.result() == []


def test_a_busy_stretch_is_judged_on_its_samples_pooled_and_unsampled_steps_say_nothing() -> None:
    """A loaded machine slows 30 steps 60x at their usual work: the sampler keeps the longest
    (most of each one's samples usual, one step caught in 2 looks of 5), the rest unnamed. No
    finding: the pooled samples are the usual work's, and an outlier the sampler kept nothing
    of shows no work of its own."""
    times = {i: 0.7 for i in range(20, 50)}
    kept = {
        f"s{i}": SlowStep(index=i, site="t.py:8", samples=13, usual_samples=12)
        for i in range(20, 30)
    }
    kept["s30"] = SlowStep(index=30, site="t.py:8", samples=5, usual_samples=2)
    assert slow_steps(_run(times, count=300, **kept)) == []
    # without the sampler (no steps.slow at all) the outliers are still reported, unnamed
    p = _run(times, count=300)
    p.steps.slow = None
    (f,) = slow_steps(p)
    assert f.site is None and len(f.evidence["steps"]) == 30


def test_short_steps_cost_the_run_their_time_above_the_median_named_or_not() -> None:
    """Steps of 4 ms, every 5th 40 ms (sampling): 0.036 s above the median each, too little for
    an unsampled outlier, and the 60 of them 64% of the loop. The sampler named 20 at the line,
    10 more between 2x and 4x the median at it too, and none of the rest (shorter than a look
    apart, or past the samples it keeps): one HIGH finding over the 60, every 5 steps. A step off
    the recurrence that it named nothing of stays out; one it named elsewhere, alone, is no
    finding."""
    times = {i: 0.04 for i in range(1, 300, 5)}
    times.update({i: 0.015 for i in range(101, 150, 5)})  # 3.75x: named, joins
    times[3] = times[7] = 0.04  # off the recurrence: unnamed, and named at another line
    named = {
        f"s{i}": SlowStep(index=i, site="t.py:5", kind="sampling", samples=2)
        for i in range(1, 300, 15)
    }
    named.update({f"j{i}": SlowStep(index=i, site="t.py:5", samples=1) for i in range(101, 150, 5)})
    named["o"] = SlowStep(index=7, site="t.py:9", samples=1)
    p = _run(times, count=300, warmup=2, **named)
    p.steps.series = [
        StepRecord(index=r.index, start_s=None, time_s=times.get(r.index, 0.004), warmup=r.warmup)
        for r in p.steps.series
    ]
    (f,) = slow_steps(p)
    assert f.site == "t.py:5" and f.evidence["steps"] == list(range(1, 300, 5))
    assert f.evidence["every_steps"] == 5 and f.evidence["kind"] == "sampling"
    excess = 50 * 0.036 + 10 * 0.011
    loop = 299 * 0.004 + excess + 2 * 0.036
    assert f.evidence["share"] == round(excess / loop, 4) and f.severity == "high"


def test_sampling_on_a_busy_machine_is_one_finding_however_usual_its_samples() -> None:
    """A loaded machine slows the training part of each sampling step too, and the looks land
    there more than in the sampling: each step shows the new work in 2 samples of 10. Recurring
    every 5 steps, it is one finding; a sampling step whose looks all landed in its training part
    (named only by the usual work, at the backward line) joins it on its recurrence. A busy
    stretch's steps caught at a rarely sampled line, not recurring and of no kind, are none."""
    times = {i: 0.04 for i in range(1, 300, 5)}
    named = {
        f"s{i}": SlowStep(index=i, site="t.py:5", kind="sampling", samples=10, usual_samples=8)
        for i in range(1, 300, 5)
    }
    for i in (21, 46):  # every look in the training part
        named[f"s{i}"] = SlowStep(index=i, site="t.py:9", samples=3, usual_samples=3)
    p = _run(times, count=300, **named)
    p.steps.series = [
        StepRecord(index=r.index, start_s=None, time_s=times.get(r.index, 0.004), warmup=r.warmup)
        for r in p.steps.series
    ]
    (f,) = slow_steps(p)
    assert f.site == "t.py:5" and f.evidence["steps"] == list(range(1, 300, 5))
    assert f.evidence["kind"] == "sampling" and f.evidence["every_steps"] == 5
    stretch = [5, 12, 44, 68, 69]
    p.steps.slow = [SlowStep(index=i, site="t.py:45", samples=5, usual_samples=4) for i in stretch]
    for r in p.steps.series:
        r.time_s = 0.04 if r.index in stretch else 0.004
    assert slow_steps(p) == []


def test_a_slow_step_is_named_by_its_new_work_even_once_seen_in_a_usual_step() -> None:
    """A busy machine: two steps in three lose a time slice (0.3 s against 0.1 s). A step of
    0.4 s that ran ``generate`` is under 1.5 times the median, usual: ``generate`` is in one of
    the usual steps' ~37 samples, against one in five of the slow steps', and stays their own
    work. A slow step with one look in ``generate`` and three in the loop's usual work is named
    by the one. A look at the usual line, at another instruction of it, is the usual work."""
    sampler = SlowStepSampler()
    sampler._tid = threading.get_ident()  # sampled from this thread, no sampling thread
    sampler._roots = [HERE]
    _busy_loop(sampler)
    sampler.stop()
    slow = {s.index: s for s in sampler.result()}
    assert sorted(slow) == [31, 35]
    assert slow[31].kind == "sampling" and slow[31].samples == 4 and slow[31].usual_samples == 3
    line = next(
        i
        for i, text in enumerate(Path(__file__).read_text().splitlines(), 1)
        if text.strip() == "generate(sampler)  # the busy loop's new work"
    )
    assert slow[31].site is not None and slow[31].site.endswith(f"test_slow_steps.py:{line}")
    assert slow[35].usual_samples == slow[35].samples == 1


def test_a_short_runs_few_usual_samples_that_missed_a_line_say_nothing_of_it() -> None:
    """A line of the loop's that the usual steps' samples never showed is the slow steps' own
    work only when they would have shown it by chance: in 40 usual samples, yes (the slow step
    is named by it); in 6, no (the slow step did the usual work, named nothing of)."""
    for steps, own in ((8, False), (42, True)):
        sampler = SlowStepSampler()
        sampler._tid = threading.get_ident()
        sampler._roots = [HERE]
        t = 0.0
        for index in range(steps):
            slow = index == steps - 1
            _loop_lines(sampler, slow)
            t += 2.0 if slow else 0.1
            sampler.on_step(index, t)
        sampler.stop()
        (step,) = sampler.result()
        assert (step.usual_samples < step.samples) is own, (steps, step)


def _loop_lines(sampler: SlowStepSampler, slow: bool) -> None:
    sampler.look()  # the line every usual look lands on
    if slow:
        for _ in range(3):
            sampler.look()  # a line of the loop the usual looks never landed on


def _busy_loop(sampler: SlowStepSampler) -> None:
    t = 0.0
    for index in range(40):
        if index in (25, 31):
            generate(sampler)  # the busy loop's new work
        _usual_work(sampler, index != 35, 3 if index == 31 else 1)
        if index in (31, 35):
            t += 2.0
        else:
            t += 0.4 if index == 25 else 0.1 if index % 3 == 0 else 0.3
        sampler.on_step(index, t)


def _usual_work(sampler: SlowStepSampler, first: bool, looks: int) -> None:
    for _ in range(looks):
        sampler.look() if first else sampler.look()  # two calls, one line


def test_the_sampler_looks_more_often_where_the_steps_are_short() -> None:
    """Half the median step between looks, from 50 ms down to 10 ms: a step four times a 4 ms
    median still gets a look; a slow step 10 ms above the median keeps its samples."""
    import threading

    sampler = SlowStepSampler()
    sampler._tid = threading.get_ident()
    sampler._roots = [HERE]
    assert sampler.interval_s == 0.05
    t = 0.0
    for index in range(30):
        slow = index == 20
        _loop_body(sampler, slow)
        t += 0.016 if slow else 0.004
        sampler.on_step(index, t)
    sampler._drain()
    assert sampler.interval_s == 0.01
    sampler.stop()
    (step,) = sampler.result()
    assert step.index == 20 and step.kind == "sampling"


def test_the_running_median_is_the_recent_steps_median() -> None:
    """The recent steps are kept in order as they come and go: each step is judged by the
    median ``statistics.median`` gives of the steps before it (the last 101)."""
    import random
    import statistics

    from gpuopt.probes import slow_steps

    sampler = SlowStepSampler()
    rng = random.Random(0)
    t = 0.0
    for index in range(400):
        t += rng.choice([0.004, 0.0045, 0.005, 0.02])
        sampler.on_step(index, t)
        if index % 7 == 0:
            sampler._drain()
            assert sampler._recent_sorted == sorted(sampler._recent)
            got = slow_steps._median(sampler._recent_sorted)
            n = len(sampler._recent)
            assert got == (statistics.median(sampler._recent) if n >= 3 else None)
    assert len(sampler._recent) == slow_steps.RECENT


def test_the_sampler_waits_until_the_running_step_would_be_slow() -> None:
    """Until a slow step is seen, a look every INTERVAL_S. From then on, while the running step
    is younger than what makes a step slow (twice the median, and MIN_INTERVAL_S more), the
    next look waits until then, at most INTERVAL_S; past it, the looks come at the usual pace
    (half the median, from INTERVAL_S down to MIN_INTERVAL_S)."""
    from gpuopt.probes import slow_steps

    for step_s, first_wait in ((0.004, 0.012), (0.2, slow_steps.INTERVAL_S)):
        sampler = SlowStepSampler()
        now = [0.0]
        sampler._clock = lambda now=now: now[0]
        sampler._last_t = 0.0
        assert sampler._wait() == slow_steps.INTERVAL_S  # no median yet
        t = 0.0
        for index in range(30):
            t += step_s
            sampler.on_step(index, t)
        now[0] = t + 0.002
        assert sampler._wait() == slow_steps.INTERVAL_S  # no slow step yet: the steady pace
        t += 5 * step_s + 0.05  # a slow step
        sampler.on_step(30, t)
        now[0] = t + 0.002
        slow_at = max(slow_steps.SLOW_FACTOR * step_s, step_s + slow_steps.MIN_INTERVAL_S)
        assert abs(sampler._wait() - min(slow_at - 0.002, first_wait)) < 1e-9
        now[0] = t + slow_at + 1e-6  # the running step is slow now
        assert sampler._wait() == sampler.interval_s
        assert sampler.interval_s == max(slow_steps.MIN_INTERVAL_S, min(step_s / 2, 0.05))


def test_no_look_comes_before_the_first_step_ends() -> None:
    """Step 0 is never judged: the sampler's thread sleeps until it ends (the script's imports
    and setup pay no GIL hand-overs), then looks at its usual pace."""
    sampler = SlowStepSampler(interval_s=0.001)
    looked = threading.Event()
    looks: list[int] = []

    def look() -> None:
        looks.append(1)
        looked.set()

    sampler.look = look  # type: ignore[method-assign]
    sampler.start(RunContext(script="x.py", user_roots=[HERE], out_dir=HERE))
    try:
        time.sleep(0.05)  # 50 of its intervals
        assert looks == []
        sampler.on_step(0, time.perf_counter())
        assert looked.wait(10.0)
    finally:
        sampler.stop()
    assert sampler._thread is None


def test_a_sampler_stopped_before_any_step_ends_its_thread() -> None:
    sampler = SlowStepSampler(interval_s=0.001)
    sampler.start(RunContext(script="x.py", user_roots=[HERE], out_dir=HERE))
    thread = sampler._thread
    sampler.stop()
    assert thread is not None and not thread.is_alive()
    assert sampler.result() == []
