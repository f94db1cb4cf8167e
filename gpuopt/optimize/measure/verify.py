"""Is it still the same training? Pure functions over the runs' training records (the speed
verdict is :mod:`gpuopt.optimize.measure.speed`'s).

**Same training.** The baseline runs several times: the largest difference between its loss
series is the script's own run-to-run *floor*. A candidate is ``exact`` when every loss and the
parameters' digest match the baseline bit for bit; ``tolerance`` when its losses stay within
float rounding (:data:`ROUNDING` of the largest loss, whatever the floor: a difference of one
float32 rounding step must not flip the verdict between two runs of the same fix), within the
floor, or within an opt-in fix's stated tolerance — the verdict's ``bound`` says which decided;
``not-comparable`` when the comparison cannot be made (no losses recorded, different step counts,
a baseline that does not repeat itself at all), with the reason; ``failed`` otherwise (the fix is
dropped).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpuopt.model.optimize import Verification
from gpuopt.model.records import TrainingRecord

# a baseline whose two runs differ by more than this (relative to the loss) does not repeat itself
NOT_REPEATABLE = 0.05


# float rounding: losses (and, when the losses are identical, the parameters' norm) this close,
# relative to the largest loss, are the same training — one float32 rounding step is 6e-8 of the
# value; a nondeterministic kernel's rounding grows over a 30-step run by a few orders at most
ROUNDING = 1e-5


def compare_training(
    base: TrainingRecord | None,
    again: TrainingRecord | Sequence[TrainingRecord | None] | None,
    cand: TrainingRecord | None,
    tolerance: float | None = None,
) -> Verification:
    """``cand`` against ``base``, with ``again`` (the baseline's other runs, one or several) for
    the floor; ``tolerance``: an opt-in fix's relative tolerance on the losses."""
    problem = _uncomparable(base, cand)
    if problem is not None:
        return Verification(verified="not-comparable", detail=problem)
    assert base is not None and cand is not None
    others = _others(again)
    n = len(base.losses)
    diff = _max_diff(base.losses, cand.losses)
    if diff == 0.0 and cand.param_digest == base.param_digest:
        detail = f"{n} losses and the parameters identical, bit for bit"
        out = Verification(verified="exact", detail=detail, max_loss_diff=0.0, steps_compared=n)
        out.bound = "identical"
        return out
    floor = _floor(base, others)
    scale = max(abs(v) for v in base.losses) or 1.0
    out = Verification(verified="failed", detail="", floor=floor, max_loss_diff=diff)
    out.steps_compared, out.loss_scale, out.baseline_runs = n, scale, 1 + len(others)
    if floor is not None and floor / scale > NOT_REPEATABLE:
        out.verified = "not-comparable"
        out.detail = (
            f"the script does not repeat itself: its baseline runs differ by {floor:.3g} in "
            "loss (seed it, or make its data order fixed)"
        )
        return out
    _judge_training(out, base, cand, others, tolerance)
    return out


def _judge_training(
    out: Verification,
    base: TrainingRecord,
    cand: TrainingRecord,
    others: list[TrainingRecord],
    tolerance: float | None,
) -> None:
    """The verdict on a difference that is not nothing, and the bound that decided it:
    float rounding first (the same difference always gets the same verdict), then the script's
    own floor, then the fix's stated tolerance."""
    diff, floor, scale = out.max_loss_diff or 0.0, out.floor, out.loss_scale or 1.0
    runs = f"{len(others) + 1} baseline runs"
    if diff == 0.0:  # the same losses, other parameters
        rel = _norm_diff(base, cand)
        if rel is not None and rel <= ROUNDING:
            out.verified, out.bound = "tolerance", "rounding"
            out.detail = (
                f"losses identical; the parameters differ at float rounding (their norms within "
                f"{rel:.2g} relative, bound {ROUNDING:g})"
            )
        elif any(o.param_digest != base.param_digest for o in others):
            out.verified, out.bound = "tolerance", "floor"
            out.detail = f"losses identical; the parameters differ, as between the script's {runs}"
        else:
            out.detail = _first_difference(base.losses, cand.losses, floor, diff)
    elif diff <= ROUNDING * scale:
        out.verified, out.bound = "tolerance", "rounding"
        out.detail = (
            f"losses within float rounding ({diff:.3g} ≤ {ROUNDING:g} of the largest loss "
            f"{scale:.4g})"
        )
    elif floor is not None and floor > 0 and diff <= floor:
        out.verified, out.bound = "tolerance", "floor"
        out.detail = (
            f"losses within the script's own run-to-run difference ({diff:.3g} ≤ {floor:.3g}, "
            f"{runs})"
        )
    elif tolerance is not None and diff <= tolerance * scale:
        out.verified, out.bound = "tolerance", "stated"
        out.detail = (
            f"losses within the fix's stated tolerance ({diff:.3g} ≤ {tolerance:g} relative)"
        )
    else:
        out.bound = "none"
        out.detail = _first_difference(base.losses, cand.losses, floor, diff)


def worst(verdicts: Sequence[Verification]) -> Verification:
    """Of a fix's runs' verdicts, the one it must be judged by: the first that failed, else the
    first not comparable, else the one with the largest difference."""
    for kind in ("failed", "not-comparable"):
        for v in verdicts:
            if v.verified == kind:
                return v
    return max(verdicts, key=lambda v: v.max_loss_diff or 0.0)


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
    out = Verification(
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
    out.bound, out.baseline_runs = "transform", v.baseline_runs
    return out


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


def _others(
    again: TrainingRecord | Sequence[TrainingRecord | None] | None,
) -> list[TrainingRecord]:
    if again is None:
        return []
    if isinstance(again, TrainingRecord):
        return [again]
    return [a for a in again if a is not None]


def _floor(base: TrainingRecord, others: Sequence[TrainingRecord]) -> float | None:
    """The largest difference between the baseline's first run and any other (None: no other
    run of the same length)."""
    diffs = [_max_diff(base.losses, o.losses) for o in others if len(o.losses) == len(base.losses)]
    return max(diffs) if diffs else None


def _norm_diff(base: TrainingRecord, cand: TrainingRecord) -> float | None:
    """The parameters' norms' relative difference (None: a norm is missing)."""
    a, b = base.param_norm, cand.param_norm
    if a is None or b is None:
        return None
    return abs(a - b) / max(abs(a), 1e-30)


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


# -- fixes that change the samples a step takes (padding-batch) ---------------------------------
def samples_per_step(ragged_samples: int | None, ragged_steps: int) -> float | None:
    """A run's mean samples per step, from its ``ragged`` record: the training batches' samples
    over the steps they were fetched in, so a step that accumulates 4 batches takes 4 of them."""
    return ragged_samples / ragged_steps if ragged_samples and ragged_steps else None


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
    out = Verification(
        verified="not-comparable",
        detail=detail,
        max_loss_diff=abs(c - b),
        steps_compared=j + 1,
        loss_scale=abs(b) or None,
    )
    out.bound = "samples"
    return out


# -- gradient accumulation (the same samples a step, in micro-batches) ------------------------
def per_step_losses(losses: Sequence[float], micro: int, divided: bool = True) -> list[float]:
    """A run's losses with ``micro`` backward passes a step, one per step: each step's
    micro-batch losses summed where the framework divides each by ``micro`` before its backward
    (Lightning), averaged where it does not (the HF Trainer, for a model that takes the loss's
    keyword arguments): either way the step's loss over its whole batch. A last step short of
    ``micro`` losses is left out."""
    n = len(losses) // micro
    scale = 1.0 if divided else 1.0 / micro
    return [sum(losses[i * micro : (i + 1) * micro]) * scale for i in range(n)]


def compare_accumulated(
    base: TrainingRecord | None,
    again: Sequence[TrainingRecord | None],
    cand: TrainingRecord | None,
    micro: int,
    tolerance: float | None,
) -> Verification:
    """A candidate that takes each step's batch in ``micro`` micro-batches against the baseline:
    its per-step losses (:func:`per_step_losses`) against the baseline's, step for step, after
    the same samples, over the steps both made (backward passes mark steps until the first
    optimizer step: the candidate makes ``micro - 1`` fewer optimizer steps). Whether the
    framework divided the recorded losses is read from the first step, where both start from
    the same parameters on the same samples: the reading closer to the baseline's first loss."""
    if base is None or cand is None or not base.losses or not cand.losses:
        return compare_training(base, again, cand, tolerance)
    summed = per_step_losses(cand.losses, micro)
    averaged = per_step_losses(cand.losses, micro, divided=False)
    first = base.losses[0]
    divided = not averaged or abs(summed[0] - first) <= abs(averaged[0] - first)
    steps = summed if divided else averaged
    n = min(len(steps), len(base.losses))
    cut = [
        TrainingRecord(
            losses=list(r.losses[:n]), param_digest=r.param_digest, param_norm=r.param_norm
        )
        for r in (base, *[a for a in again if a is not None])
    ]
    grouped = TrainingRecord(
        losses=steps[:n], param_digest=cand.param_digest, param_norm=cand.param_norm
    )
    out = compare_training(cut[0], cut[1:], grouped, tolerance)
    if out.verified == "failed" and out.max_loss_diff == 0.0:  # the parameters alone differ:
        out.verified, out.bound = "tolerance", "rounding"  # another order of the same sums
        out.detail = "the per-step losses identical; the parameters differ at float rounding"
    how = "summed (each divided by the framework)" if divided else "averaged"
    out.detail = (
        f"{micro} micro-batches a step, their losses {how} per step, compared after the same "
        f"samples over {n} steps: {out.detail}"
    )
    return out
