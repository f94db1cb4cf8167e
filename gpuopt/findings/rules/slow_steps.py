"""``slow-steps``: steps many times the median step, late in the run or recurring, named.

A step of :data:`SLOW_FACTOR` times the median measured step or more (and :data:`MIN_EXCESS_S`
longer; where the slow-step sampler ran, :data:`SAMPLED_MIN_EXCESS_S`: its stack samples tell work
from noise) is an outlier; one only among the warm-up steps, and not seen again, is warm-up. The
others are work the loop does now and then (sampling from the model, an evaluation, a checkpoint):
steps the recorder or the memory probe slowed are left out, and the outliers are grouped by the line
the sampler named (``steps.slow``; a step whose samples showed only the usual steps' work is named
nothing of: the machine, not the line, made it slow). A group is a finding when one of its steps is
past the warm-up or it recurs, its stack samples, pooled, show work the usual steps never did, or
:data:`MIN_RECURRING` of its steps each did, recurring or of a kind named (steps slow at the loop's
usual work are a busy machine's), and its steps cost the run :data:`MIN_GROUP_EXCESS_S` or more. The
same work in shorter steps joins it: a step of :data:`JOIN_FACTOR` times the median the sampler
named at the group's line, and one it named nothing of (shorter than a look apart, or past the
samples it keeps) that falls on the group's recurrence; any other outlier it named nothing of shows
nothing of its own and is left out. The finding: its line, what the stacks say it did, its steps and
what they cost the run (their time above the median, of the loop's time: the steps after the first,
whose time is the script's start), the severity by that share.
"""

from __future__ import annotations

from collections import Counter

from gpuopt.findings.engine import rule
from gpuopt.findings.estimates import severity_for_share, speedup_if_removed
from gpuopt.model.profile import Finding, Profile
from gpuopt.model.records import SlowStep, StepRecord, given
from gpuopt.units import fmt_count, fmt_duration, fmt_frac

SLOW_FACTOR = 4.0  # an outlier: this many times the median measured step ...
JOIN_FACTOR = 2.0  # ... joined by the steps this many times it that are the same work ...
MIN_EXCESS_S = 0.1  # ... and this much longer than it, unsampled (a trace's steps) ...
SAMPLED_MIN_EXCESS_S = 0.01  # ... or sampled: the sampler's finest interval, a look or more
MIN_GROUP_EXCESS_S = 0.1  # a group's steps cost the run this much above the median, or more
MAX_FINDINGS = 3
MIN_MEASURED = 5  # a median needs this many measured steps
MIN_RECURRING = 3  # steps that showed the same new work: the loop's, not a busy stretch's
FIXES = {
    "sampling": "Sample less often or fewer tokens, or sample from a copy of the weights in "
    "another process, outside the training loop.",
    "evaluation": "Evaluate less often or on fewer batches (under torch.no_grad() or "
    "torch.inference_mode()), or in another process from a saved checkpoint.",
    "checkpointing": "Save less often, or asynchronously "
    "(torch.distributed.checkpoint.async_save), from a copy of the state on the host.",
}
FIX = (
    "This work runs inside the training loop every so often: do it less often, on less data, "
    "or outside the loop (another process, asynchronously)."
)


def _median(series: list[StepRecord]) -> float | None:
    """The median measured step (None below :data:`MIN_MEASURED` of them)."""
    measured = [r.time_s for r in series if not r.warmup and not given(r.instrumented)]
    if len(measured) < MIN_MEASURED:
        return None
    import statistics  # here, not at the top: 5-10 ms of every report's start

    return float(statistics.median(measured))


@rule("slow-steps", reads=("steps",))
def slow_steps(profile: Profile) -> list[Finding]:
    series = profile.steps.series
    median = _median(series)
    if median is None:
        return []
    sampled = given(profile.steps.slow)
    min_excess = MIN_EXCESS_S if sampled is None else SAMPLED_MIN_EXCESS_S
    slower = [
        r
        for r in series
        if r.index > 0
        and not given(r.instrumented)
        and r.time_s >= JOIN_FACTOR * median
        and r.time_s - median >= min_excess
    ]
    outliers = [r for r in slower if r.time_s >= SLOW_FACTOR * median]
    # a step whose samples showed only the loop's usual work says nothing of what made it slow
    # (a busy machine slows the usual work too): it is one the sampler named nothing of
    named = {s.index: s for s in sampled or [] if not s.samples or s.usual_samples < s.samples}
    groups: dict[str | None, list[StepRecord]] = {}
    for r in outliers:
        s = named.get(r.index)
        if s is not None or sampled is None:  # else: joins a group by its period, or nothing
            groups.setdefault(s.site if s is not None else None, []).append(r)
    grouped = {r.index for steps in groups.values() for r in steps}
    joining = [] if sampled is None else [r for r in slower if r.index not in grouped]
    total = _loop_time(series, median)
    out: list[Finding] = []
    for site, steps in groups.items():
        if _usual([named[r.index] for r in steps if r.index in named]):
            continue  # slow doing the loop's usual work: a busy machine, not work of its own
        steps = _joined(steps, site, joining, named)
        if len(steps) < 2 and all(r.warmup for r in steps):
            continue  # one slow warm-up step: warm-up
        if sum(r.time_s - median for r in steps) < MIN_GROUP_EXCESS_S:
            continue  # too little of the run to be worth a finding
        names = [named[r.index] for r in steps if r.index in named]
        out.append(_finding(site, steps, names, median, total))
    out.sort(key=lambda f: -float(f.evidence["excess_s"]))
    return out[:MAX_FINDINGS]


def _loop_time(series: list[StepRecord], median: float) -> float:
    """The training loop's time: its steps after the first (whose time is the script's start:
    imports, the model built, the first calls), a step a probe slowed counted at the median."""
    return sum(median if given(r.instrumented) else r.time_s for r in series if r.index > 0)


def _joined(
    steps: list[StepRecord],
    site: str | None,
    joining: list[StepRecord],
    named: dict[int, SlowStep],
) -> list[StepRecord]:
    """A group of outliers with the slower steps that are the same work (taken out of
    ``joining``): those the sampler named at its line (it keeps the samples of steps
    :data:`JOIN_FACTOR` times the median), then those it named nothing of (steps shorter than a
    look apart, or past the samples it keeps) that fall on the group's recurrence (its period,
    at the phase most of its steps are at)."""
    same = [
        r for r in joining if site is not None and r.index in named and named[r.index].site == site
    ]
    group = sorted(steps + same, key=lambda r: r.index)
    every = _period([r.index for r in group])
    on: list[StepRecord] = []
    if every is not None and every >= 3:
        phase = Counter(r.index % every for r in group).most_common(1)[0][0]
        on = [r for r in joining if r.index not in named and r.index % every == phase]
    for r in same + on:
        joining.remove(r)
    return sorted(group + on, key=lambda r: r.index)


def _usual(names: list[SlowStep]) -> bool:
    """Slow steps whose stack samples, pooled, showed most of them only the usual steps' frames
    (pooled: one step of a busy stretch caught in 2 looks of 5 does not make the stretch work
    of its own), unless :data:`MIN_RECURRING` of them showed new work at the line they are
    named by, and it recurs (every 3 steps or more) or says what it is: the same sampling every
    5 steps is the loop's, however busy the machine made the usual work around it; a busy
    stretch's steps caught at a rarely sampled usual line are neither."""
    if len(names) >= MIN_RECURRING and (
        2 * sum(1 for n in names if n.kind) >= len(names)
        or (_period([n.index for n in names]) or 0) >= 3
    ):
        return False
    samples = sum(n.samples for n in names)
    return samples > 0 and 2 * sum(n.usual_samples for n in names) > samples


def _what(names: list[SlowStep]) -> tuple[str | None, str | None, list[str], int, int]:
    """(kind, code, innermost calls, samples, samples at the site) over a group's steps."""
    kinds = [n.kind for n in names if n.kind]
    kind = max(set(kinds), key=kinds.count) if kinds else None
    code = next((n.code for n in names if n.code), None)
    calls: list[str] = []
    for n in names:
        calls += [c for c in n.calls if c not in calls]
    return kind, code, calls[:3], sum(n.samples for n in names), sum(n.at_site for n in names)


def _finding(
    site: str | None,
    steps: list[StepRecord],
    names: list[SlowStep],
    median: float,
    total: float,
) -> Finding:
    excess = sum(r.time_s - median for r in steps)
    share = excess / total if total > 0 else 0.0
    kind, code, calls, samples, at_site = _what(names)
    longest = max(r.time_s for r in steps)
    indices = [r.index for r in steps]
    every = _period(indices)
    where = f"{site}" + (f" `{code}`" if code else "") if site else "a line not sampled"
    what = f" ({kind})" if kind else ""
    recurring = f", every {fmt_count(every)} steps" if every else ""
    summary = (
        f"{fmt_count(len(steps))} step(s) up to {fmt_duration(longest)}, "
        f"{longest / median:.0f}× the median step ({fmt_duration(median)}){recurring}: "
        f"{fmt_duration(excess)} above the median, {fmt_frac(share)} of the loop's time; "
        f"their time went to {where}{what}"
    )
    if samples:
        summary += f" ({fmt_count(at_site)} of {fmt_count(samples)} stack samples)"
    return Finding(
        id="slow-steps",
        severity=severity_for_share(share),
        title=f"Step(s) far slower than the others: {kind or 'work'} inside the training loop",
        site=site,
        evidence={
            "summary": summary,
            "steps": indices,
            "longest_s": round(longest, 4),
            "median_s": round(median, 6),
            "excess_s": round(excess, 4),
            "share": round(share, 4),
            "every_steps": every,
            "kind": kind,
            "code": code,
            "calls": calls,
            "samples": samples,
            "samples_at_site": at_site,
        },
        fix=FIXES.get(kind or "", FIX),
        est_speedup=speedup_if_removed(share),
        estimate_model=(
            "Amdahl: the outlier steps' time above the median step, all assumed removed from "
            "the loop (done elsewhere or not at all)"
        ),
    )


def _period(indices: list[int]) -> int | None:
    """The steps between recurrences, when the gaps agree within a step (a gap of a whole number
    of periods, from 3 steps up, is a recurrence the sampler named nothing of)."""
    gaps = [b - a for a, b in zip(indices, indices[1:], strict=False)]
    if not gaps:
        return None
    import statistics

    shortest = min(gaps)
    every = round(statistics.median([g for g in gaps if g <= shortest + 1]))
    whole = (lambda g: max(1, round(g / every))) if every >= 3 else (lambda g: 1)
    if any(abs(g - every * whole(g)) > 1 for g in gaps):
        return None
    return every
