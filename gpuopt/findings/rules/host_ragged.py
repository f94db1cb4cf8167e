"""``ragged-batches``: variable-size input that keeps the GPU from running full, repeatable batches.

Four signs, all measured: many distinct batch shapes (each new shape defeats CUDA graphs, cuDNN
autotuning and compile caches), batch size 1 with variable-size samples, a Python loop inside the
step that runs once per sample of the batch, and padding that is mostly waste.
"""

from __future__ import annotations

from typing import Any

from gpuopt.findings.engine import rule
from gpuopt.findings.model import Finding, severity_for_share, speedup_if_removed
from gpuopt.findings.rules.host_common import entries, fmt_count, from_trace, num, obj, pct

MIN_BATCHES = 4
MIN_NEW_SHAPE_SHARE = 0.3  # at least 30% of batches bring a shape not seen before
MIN_PAD_FRACTION = 0.2
BUCKET_FIX = (
    "Pad samples to a few bucket sizes and batch them: a bucketing sampler that groups "
    "samples of similar size, a pad collate (gpuopt.batching) that pads each batch to its "
    "bucket, and a loss masked to the real positions."
)


def _loader_site(doc: dict[str, Any]) -> str | None:
    for loader in entries(doc, "dataloaders"):
        if loader.get("site"):
            return str(loader["site"])
    return None


def _compute_share(doc: dict[str, Any]) -> float:
    """Share of the step that is op work (padding wastes a part of it)."""
    bd = obj(doc, "breakdown")
    if num(bd.get("compute")) > 0:
        return num(bd.get("compute"))
    return num(obj(doc, "dispatch").get("op_time_share"))


@rule("ragged-batches")
def ragged_batches(doc: dict[str, Any]) -> list[Finding]:
    if from_trace(doc):
        return []
    r = obj(doc, "ragged")
    findings: list[Finding] = []
    batches = num(r.get("batches"))
    distinct = num(r.get("distinct_shapes"))
    new_share = num(r.get("new_shape_share"))
    signs: list[str] = []
    if r.get("batch_size_1_variable"):
        signs.append(
            f"batch size 1 with variable-size samples ({', '.join(map(str, r.get('variable_dims') or [])) or 'list batches'})"
        )
    if batches >= MIN_BATCHES and distinct >= 3 and new_share >= MIN_NEW_SHAPE_SHARE:
        signs.append(f"{fmt_count(distinct)} distinct input shapes in {fmt_count(batches)} batches")
    if signs:
        findings.append(
            Finding(
                id="ragged-batches",
                severity="medium",
                title="Variable-size batches: " + "; ".join(signs),
                site=_loader_site(doc),
                evidence={
                    "summary": "; ".join(signs),
                    "batches": batches,
                    "distinct_shapes": distinct,
                    "new_shape_share": new_share,
                    "batch_sizes": r.get("batch_sizes"),
                    "variable_dims": r.get("variable_dims"),
                },
                fix=BUCKET_FIX,
                est_speedup=None,
                estimate_model=(
                    "not estimated: the gain of batching fixed shapes depends on GPU occupancy and "
                    "on caches (graphs, autotuning) a host-side measurement cannot see"
                ),
            )
        )
    pad = num(r.get("pad_fraction"))
    if pad >= MIN_PAD_FRACTION:
        compute = _compute_share(doc)
        findings.append(
            Finding(
                id="ragged-batches",
                severity=severity_for_share(pad * compute),
                title=f"{pct(pad)} of the padded batch is padding",
                site=_loader_site(doc),
                evidence={
                    "summary": f"{pct(pad)} of the elements of {r.get('pad_tensor')} are padding in the batches scanned",
                    "pad_fraction": pad,
                    "pad_tensor": r.get("pad_tensor"),
                    "compute_share": round(compute, 4),
                },
                fix=(
                    "Pad each batch only to its own longest sample and group samples of similar length: a "
                    "bucketing/length-grouped sampler with a pad collate (gpuopt.batching)."
                ),
                est_speedup=speedup_if_removed(pad * compute),
                estimate_model=(
                    f"Amdahl: padded positions cost compute in proportion ({pct(pad)} of the "
                    f"{pct(compute)} compute share), all assumed removed by bucketing"
                ),
            )
        )
    batch_size = num(r.get("batch_size"))
    if batch_size >= 2:
        for loop in entries(doc, "loops"):
            if num(loop.get("iterations_per_step")) != batch_size:
                continue
            share = num(loop.get("time_share"))
            findings.append(
                Finding(
                    id="ragged-batches",
                    severity=severity_for_share(share),
                    title=f"Per-sample Python loop inside the step ({fmt_count(batch_size)} iterations = batch size)",
                    site=str(loop.get("site") or "?"),
                    evidence={
                        "summary": (
                            f"the loop runs once per sample ({fmt_count(batch_size)} per step) and issues "
                            f"{fmt_count(num(loop.get('ops_per_step')))} ops per step ({pct(share)} of the step)"
                        ),
                        "iterations_per_step": num(loop.get("iterations_per_step")),
                        "batch_size": batch_size,
                        "ops_per_step": num(loop.get("ops_per_step")),
                        "loop_share": share,
                        **({"code": loop["code"]} if loop.get("code") else {}),
                    },
                    fix=(
                        "Run the model once on the whole batch: pad the samples into one tensor (pad collate) "
                        "with a mask of the real positions, instead of looping over samples."
                    ),
                    est_speedup=speedup_if_removed(share, keep=1.0 / batch_size),
                    estimate_model=f"Amdahl: batched, the loop costs about one iteration's time (1/{fmt_count(batch_size)} of {pct(share)})",
                )
            )
    return findings
