"""``ragged-batches``: variable-size input that keeps the GPU from running full, repeatable batches.

Four signs, all measured: many distinct batch shapes (each new shape defeats CUDA graphs, cuDNN
autotuning and compile caches), batch size 1 with variable-size samples, a Python loop inside the
step that runs once per sample of the batch, and padding that is mostly waste.
"""

from __future__ import annotations

from msgspec import UnsetType

from gpuopt.findings.engine import rule
from gpuopt.findings.estimates import speedup_if_removed
from gpuopt.findings.evidence import Drift, Model, drift_of, rated, recorder_model
from gpuopt.findings.measures import from_trace, value
from gpuopt.model.profile import Finding, Loop, Profile, Ragged
from gpuopt.model.records import given
from gpuopt.units import fmt_count, fmt_frac

MIN_BATCHES = 4
MIN_NEW_SHAPE_SHARE = 0.3  # at least 30% of batches bring a shape not seen before
MIN_PAD_FRACTION = 0.2
BUCKET_FIX = (
    "Pad samples to a few bucket sizes and batch them: a bucketing sampler that groups "
    "samples of similar size, a pad collate (gpuopt.batching) that pads each batch to its "
    "bucket, and a loss masked to the real positions."
)


def _loader_site(profile: Profile) -> str | None:
    for loader in profile.dataloaders or []:
        if loader.site:
            return loader.site
    return None


def _compute_share(profile: Profile) -> float:
    """Share of the step that is op work (padding wastes a part of it)."""
    if profile.breakdown.compute > 0:
        return profile.breakdown.compute
    return value(profile.dispatch.op_time_share)


def _shape_finding(profile: Profile, r: Ragged) -> Finding | None:
    signs: list[str] = []
    if r.batch_size_1_variable:
        dims = ", ".join(r.variable_dims) or "list batches"
        signs.append(f"batch size 1 with variable-size samples ({dims})")
    batches, distinct = r.batches, r.distinct_shapes
    new_share = value(r.new_shape_share)
    if batches >= MIN_BATCHES and distinct >= 3 and new_share >= MIN_NEW_SHAPE_SHARE:
        signs.append(f"{fmt_count(distinct)} distinct input shapes in {fmt_count(batches)} batches")
    if not signs:
        return None
    return Finding(
        id="ragged-batches",
        severity="medium",
        title="Variable-size batches: " + "; ".join(signs),
        site=_loader_site(profile),
        evidence={
            "summary": "; ".join(signs),
            "batches": float(batches),
            "distinct_shapes": float(distinct),
            "new_shape_share": new_share,
            "batch_sizes": r.batch_sizes,
            "variable_dims": r.variable_dims,
        },
        fix=BUCKET_FIX,
        est_speedup=None,
        estimate_model=(
            "not estimated: the gain of batching fixed shapes depends on GPU occupancy and "
            "on caches (graphs, autotuning) a host-side measurement cannot see"
        ),
    )


def _padding_finding(profile: Profile, r: Ragged) -> Finding | None:
    pad = value(r.pad_fraction)
    if pad < MIN_PAD_FRACTION:
        return None
    compute = _compute_share(profile)
    per_step = [pad * x for x in given(profile.dispatch.op_time_share_steps) or []]
    interval, judged = rated(pad * compute, per_step, "padded_compute_share", drift_of(profile))
    return Finding(
        id="ragged-batches",
        severity=judged.severity,
        interval=interval,
        borderline=judged.borderline,
        title=f"{fmt_frac(pad)} of the padded batch is padding",
        site=_loader_site(profile),
        evidence={
            "summary": f"{fmt_frac(pad)} of the elements of {r.pad_tensor} are padding in the "
            "batches scanned",
            "pad_fraction": pad,
            "pad_tensor": r.pad_tensor,
            "compute_share": round(compute, 4),
        },
        fix=(
            "Pad each batch only to its own longest sample and group samples of similar "
            "length: a bucketing/length-grouped sampler with a pad collate (gpuopt.batching)."
        ),
        est_speedup=speedup_if_removed(pad * compute),
        estimate_model=(
            f"Amdahl: padded positions cost compute in proportion ({fmt_frac(pad)} of the "
            f"{fmt_frac(compute)} compute share), all assumed removed by bucketing"
        ),
    )


def _per_sample_finding(
    loop: Loop, batch_size: float, drift: Drift, model: Model | None
) -> Finding:
    share = value(loop.time_share)
    ops = value(loop.ops_per_step)
    code = loop.code if isinstance(loop.code, str) and loop.code else None
    interval, judged = rated(share, given(loop.time_share_steps), "loop_share", drift, model=model)
    return Finding(
        id="ragged-batches",
        severity=judged.severity,
        interval=interval,
        borderline=judged.borderline,
        title=f"Per-sample Python loop inside the step ({fmt_count(batch_size)} iterations = "
        "batch size)",
        site=loop.site or "?",
        evidence={
            "summary": (
                f"the loop runs once per sample ({fmt_count(batch_size)} per step) and issues "
                f"{fmt_count(ops)} ops per step ({fmt_frac(share)} of the step)"
            ),
            "iterations_per_step": value(loop.iterations_per_step),
            "batch_size": batch_size,
            "ops_per_step": ops,
            "loop_share": share,
            **({"code": code} if code else {}),
        },
        fix=(
            "Run the model once on the whole batch: pad the samples into one tensor (pad "
            "collate) with a mask of the real positions, instead of looping over samples."
        ),
        est_speedup=speedup_if_removed(share, keep=1.0 / batch_size),
        estimate_model=(
            f"Amdahl: batched, the loop costs about one iteration's time "
            f"(1/{fmt_count(batch_size)} of {fmt_frac(share)})"
        ),
    )


@rule(
    "ragged-batches",
    reads=(
        "source",
        "ragged",
        "dataloaders",
        "breakdown",
        "dispatch",
        "loops",
        "utilization",
        "steps",
    ),
)
def ragged_batches(profile: Profile) -> list[Finding]:
    r = profile.ragged
    if from_trace(profile) or isinstance(r, UnsetType):
        return []
    found = [_shape_finding(profile, r), _padding_finding(profile, r)]
    findings = [f for f in found if f is not None]
    batch_size = value(r.batch_size)
    if batch_size >= 2:
        findings += [
            _per_sample_finding(
                loop,
                batch_size,
                drift_of(profile),
                recorder_model(profile, value(loop.ops_per_step)),
            )
            for loop in profile.loops
            if value(loop.iterations_per_step) == batch_size
        ]
    return findings
