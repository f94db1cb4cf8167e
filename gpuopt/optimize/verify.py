"""Is it still the same training, and did it get faster? Pure functions over the runs' training
records and step times.

**Same training.** The baseline runs twice: the largest difference between its two loss series is
the script's own run-to-run *floor*. A candidate is ``exact`` when every loss and the parameters'
digest match the baseline bit for bit; ``tolerance`` when its losses stay within the floor (or an
opt-in fix's stated tolerance); ``not-comparable`` when the comparison cannot be made (no losses
recorded, different step counts, a baseline that does not repeat itself at all), with the reason;
``failed`` otherwise (the fix is dropped).

**Faster.** Each run's steps per second is its measured steps over their total time (a
throughput: a stall in a few steps, such as a DataLoader refilling at each epoch, counts in full,
where a median step would hide it); the speedup is the median over the candidate's runs over the
median over the baseline's. The interval is a seeded bootstrap of the ratio of mean step times
over the pooled steps of each side (:mod:`gpuopt.gate.intervals`), and the baseline's own spread
between its runs is the noise: a gain is *measurable* only when the interval's low end clears
1 + noise. Otherwise it is reported as "no measurable gain", never as a win.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import median

from gpuopt.gate.intervals import ratio_of_means
from gpuopt.model.optimize import Gain, Verification
from gpuopt.model.records import TrainingRecord

# a baseline whose two runs differ by more than this (relative to the loss) does not repeat itself
NOT_REPEATABLE = 0.05


def compare_training(
    base: TrainingRecord | None,
    again: TrainingRecord | None,
    cand: TrainingRecord | None,
    tolerance: float | None = None,
) -> Verification:
    """``cand`` against ``base``, with ``again`` (the baseline's second run, if any) for the
    floor; ``tolerance``: an opt-in fix's relative tolerance on the losses."""
    problem = _uncomparable(base, cand)
    if problem is not None:
        return Verification(verified="not-comparable", detail=problem)
    assert base is not None and cand is not None
    n = len(base.losses)
    diff = _max_diff(base.losses, cand.losses)
    if diff == 0.0 and cand.param_digest == base.param_digest:
        detail = f"{n} losses and the parameters identical, bit for bit"
        return Verification(verified="exact", detail=detail, max_loss_diff=0.0, steps_compared=n)
    floor = _floor(base, again)
    scale = max(abs(v) for v in base.losses) or 1.0
    out = Verification(verified="failed", detail="", floor=floor, max_loss_diff=diff)
    out.steps_compared, out.loss_scale = n, scale
    if floor is not None and floor / scale > NOT_REPEATABLE:
        out.verified = "not-comparable"
        out.detail = (
            f"the script does not repeat itself: its two baseline runs differ by {floor:.3g} in "
            "loss (seed it, or make its data order fixed)"
        )
    elif floor is not None and floor > 0 and diff <= floor:
        out.verified = "tolerance"
        out.detail = (
            f"losses within the script's own run-to-run difference ({diff:.3g} ≤ {floor:.3g})"
        )
    elif tolerance is not None and diff <= tolerance * scale:
        out.verified = "tolerance"
        out.detail = (
            f"losses within the fix's stated tolerance ({diff:.3g} ≤ {tolerance:g} relative)"
        )
    else:
        out.detail = _first_difference(base.losses, cand.losses, floor, diff)
    return out


# a transform whose forward matches: losses may still drift this far (other dropout masks)
DRIFT = 0.10


def with_transform_check(
    v: Verification, check: dict[str, object] | None, tolerance: float | None
) -> Verification:
    """A model transform's verdict when its losses moved beyond the tolerance: the model's own
    outputs on one batch, in eval mode, before and after the transform (``check``), within the
    tolerance, and the losses within :data:`DRIFT` of the baseline's, make it ``tolerance`` —
    the transform keeps the model's numbers, the training draws its dropout masks in another
    order (compiled kernels, channels_last memory) or rounds differently; else the verdict
    stands."""
    if v.verified != "failed" or check is None or tolerance is None:
        return v
    rel = check.get("rel_diff")
    if not isinstance(rel, (int, float)) or rel > tolerance:
        return v
    if v.max_loss_diff is None or v.max_loss_diff > DRIFT * (v.loss_scale or 1.0):
        return v
    return Verification(
        verified="tolerance",
        detail=(
            f"the model's outputs on the same batch (eval mode) within {rel:.2g} of the "
            f"original's (tolerance {tolerance:g}); the losses moved by up to "
            f"{v.max_loss_diff:.3g} as the training draws its random numbers in another order "
            "or rounds differently"
        ),
        floor=v.floor,
        max_loss_diff=v.max_loss_diff,
        steps_compared=v.steps_compared,
        loss_scale=v.loss_scale,
    )


def _uncomparable(base: TrainingRecord | None, cand: TrainingRecord | None) -> str | None:
    if base is None or cand is None:
        return "a run recorded no training (it ended before the first step, or failed)"
    if not base.losses:
        return "no loss was seen: no loss.backward() on a one-element tensor"
    if len(base.losses) != len(cand.losses):
        return (
            f"the runs recorded different numbers of losses ({len(base.losses)} and "
            f"{len(cand.losses)}): they did not train the same steps"
        )
    if any(math.isnan(v) for v in (*base.losses, *cand.losses)):
        return "a loss is NaN"
    return None


def _max_diff(a: Sequence[float], b: Sequence[float]) -> float:
    return max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0)


def _floor(base: TrainingRecord, again: TrainingRecord | None) -> float | None:
    if again is None or len(again.losses) != len(base.losses):
        return None
    return _max_diff(base.losses, again.losses)


def _first_difference(
    base: Sequence[float], cand: Sequence[float], floor: float | None, diff: float
) -> str:
    i = next(i for i, (x, y) in enumerate(zip(base, cand, strict=True)) if x != y) if diff else 0
    where = f"from loss {i + 1}: {base[i]!r} became {cand[i]!r}" if diff else "the parameters"
    own = (
        "the script itself repeats exactly"
        if floor == 0.0
        else f"the script's own floor is {floor:.3g}"
        if floor is not None
        else "the script's own floor is unknown (one baseline run)"
    )
    return f"training changed {where} ({own})"


def throughput(step_s: Sequence[float]) -> float | None:
    """Steps per second of one run: its measured steps over their total time."""
    total = sum(step_s)
    return len(step_s) / total if step_s and total > 0 else None


def throughputs(runs: Sequence[Sequence[float]]) -> list[float]:
    return [t for run in runs if (t := throughput(run)) is not None]


def gain(
    baseline_runs: Sequence[Sequence[float]],
    candidate_runs: Sequence[Sequence[float]],
    min_steps: int = 3,
    skip: int = 0,
) -> Gain:
    """Candidate steps/s over baseline steps/s, from per-step times (seconds) of each run;
    ``skip``: steps left out at the start of every run, on both sides (a fix that compiles
    first is measured once it has)."""
    if skip:
        baseline_runs = [run[skip:] for run in baseline_runs]
        candidate_runs = [run[skip:] for run in candidate_runs]
    base = [t for run in baseline_runs for t in run]
    cand = [t for run in candidate_runs for t in run]
    if len(base) < min_steps or len(cand) < min_steps:
        return Gain(speedup=None, label=f"not measured: fewer than {min_steps} measured steps")
    # ratio_of_means(cand, base) is mean(base) / mean(cand): a time ratio = speedup in steps/s
    _, low, high = ratio_of_means(cand, base)
    speedup = median(throughputs(candidate_runs)) / median(throughputs(baseline_runs))
    rates = throughputs(baseline_runs)
    noise = (max(rates) / min(rates) - 1.0) if len(rates) > 1 else 0.0
    measurable = low > 1.0 + noise or high < 1.0 - noise
    out = Gain(
        speedup=round(speedup, 4),
        low=round(low, 4),
        high=round(high, 4),
        noise=round(noise, 4),
        measurable=measurable,
    )
    if not measurable:
        out.label = "no measurable gain"
    elif speedup >= 1.0:
        out.label = f"{speedup:.2f}x faster"
    else:
        out.label = f"{1 / speedup:.2f}x slower"
    return out


# -- fixes that change the samples a step takes (padding-batch) ---------------------------------
def samples_per_step(ragged_samples: int | None, ragged_batches: int) -> float | None:
    """A run's mean samples per training batch, from its ``ragged`` record."""
    return ragged_samples / ragged_batches if ragged_samples and ragged_batches else None


def per_sample_times(step_s: Sequence[float], samples: float | None) -> list[float]:
    """Step times as times per sample (a gain over them is a gain in samples per second)."""
    return [t / samples for t in step_s] if samples else list(step_s)


def compare_by_samples(
    base: TrainingRecord | None,
    cand: TrainingRecord | None,
    base_k: float | None,
    cand_k: float | None,
) -> Verification:
    """A candidate that takes other batches than the baseline (``cand_k`` samples a step
    against ``base_k``): never comparable step for step; the detail puts the two losses side
    by side after the same number of samples — the candidate's loss at its last step within
    the samples the baseline saw, the baseline's mean over the steps that saw those samples."""
    why = "changes the optimisation (other batches)"
    if base is None or cand is None or not base.losses or not cand.losses or not base_k:
        return Verification(verified="not-comparable", detail=f"{why}; no losses to compare")
    if not cand_k:
        return Verification(verified="not-comparable", detail=f"{why}; batch sizes unknown")
    seen = len(base.losses) * base_k
    j = min(int(seen // cand_k), len(cand.losses)) - 1  # the candidate's last step within them
    if j < 0:
        return Verification(
            verified="not-comparable",
            detail=f"{why}: {cand_k:.3g} samples a step, more than the baseline saw in its run",
        )
    upto = (j + 1) * cand_k
    lo, hi = int((upto - cand_k) // base_k), max(int(upto // base_k), 1)
    window = base.losses[lo:hi] or base.losses[-1:]
    b, c = sum(window) / len(window), cand.losses[j]
    rel = (c - b) / abs(b) if b else 0.0
    detail = (
        f"{why}: {cand_k:.3g} samples a step instead of {base_k:.3g}, so not comparable step "
        f"for step; after the same {upto:.0f} samples the loss is {c:.4g} (its step {j + 1}) "
        f"against {b:.4g} (the baseline's mean over its steps {lo + 1}-{hi}): {rel:+.1%}"
    )
    return Verification(
        verified="not-comparable",
        detail=detail,
        max_loss_diff=abs(c - b),
        steps_compared=j + 1,
        loss_scale=abs(b) or None,
    )
