"""``slow-steps``: steps many times the median step, late in the run or recurring, named.

A step of :data:`SLOW_FACTOR` times the median measured step or more (and :data:`MIN_EXCESS_S`
longer) is an outlier; one only among the warm-up steps, and not seen again, is warm-up. The
others are work the loop does now and then (sampling from the model, an evaluation, a
checkpoint): steps the recorder or the memory probe slowed are left out, and the outliers are
grouped by the line the slow-step sampler named (``steps.slow``). A group is a finding when one of
its steps is past the warm-up or it recurs, and its stack samples, pooled, show work the usual
steps never did (steps slow at the loop's usual work are a busy machine's; where the sampler ran,
an outlier it kept no sample of shows nothing of its own and is left out): its line, what the
stacks say it did, its steps and what they cost the run (their time above the median, of the
steps' total).
"""

from __future__ import annotations

from gpuopt.findings.engine import rule
from gpuopt.findings.estimates import severity_for_share, speedup_if_removed
from gpuopt.model.profile import Finding, Profile
from gpuopt.model.records import SlowStep, StepRecord, given
from gpuopt.units import fmt_count, fmt_duration, fmt_frac

SLOW_FACTOR = 4.0  # an outlier: this many times the median measured step ...
MIN_EXCESS_S = 0.1  # ... and this much longer than it
MAX_FINDINGS = 3
MIN_MEASURED = 5  # a median needs this many measured steps
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


def _outliers(series: list[StepRecord]) -> tuple[float, list[StepRecord]] | None:
    """The median measured step and the outlier steps (warm-up ones included)."""
    measured = [r.time_s for r in series if not r.warmup and not given(r.instrumented)]
    if len(measured) < MIN_MEASURED:
        return None
    import statistics  # here, not at the top: 5-10 ms of every report's start

    median = statistics.median(measured)
    out = [
        r
        for r in series
        if r.index > 0
        and not given(r.instrumented)
        and r.time_s >= SLOW_FACTOR * median
        and r.time_s - median >= MIN_EXCESS_S
    ]
    return median, out


@rule("slow-steps", reads=("steps",))
def slow_steps(profile: Profile) -> list[Finding]:
    found = _outliers(profile.steps.series)
    if found is None or not found[1]:
        return []
    median, outliers = found
    sampled = given(profile.steps.slow)
    named = {s.index: s for s in sampled or []}
    groups: dict[str | None, list[StepRecord]] = {}
    for r in outliers:
        s = named.get(r.index)
        if s is None and sampled is not None:
            continue  # the sampler ran and kept nothing of it: no sign of work of its own
        groups.setdefault(s.site if s is not None else None, []).append(r)
    total = sum(r.time_s for r in profile.steps.series)
    out: list[Finding] = []
    for site, steps in groups.items():
        if len(steps) < 2 and all(r.warmup for r in steps):
            continue  # one slow warm-up step: warm-up
        if _usual([named[r.index] for r in steps if r.index in named]):
            continue  # slow doing the loop's usual work: a busy machine, not work of its own
        names = [named[r.index] for r in steps if r.index in named]
        out.append(_finding(site, steps, names, median, total))
    out.sort(key=lambda f: -float(f.evidence["excess_s"]))
    return out[:MAX_FINDINGS]


def _usual(names: list[SlowStep]) -> bool:
    """Slow steps whose stack samples, pooled, showed most of them only the usual steps' frames
    (pooled: one step of a busy stretch caught in 2 looks of 5 does not make the stretch work
    of its own)."""
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
        f"{fmt_duration(excess)} above the median, {fmt_frac(share)} of the run's step time; "
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
    """The steps between recurrences, when the gaps agree (within one step)."""
    gaps = [b - a for a, b in zip(indices, indices[1:], strict=False)]
    if not gaps or max(gaps) - min(gaps) > 1:
        return None
    import statistics

    return round(statistics.median(gaps))
