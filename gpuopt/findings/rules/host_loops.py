"""``loop-indexing``: a Python loop that indexes tensors element by element inside the step.

``for i in range(n): out[i] = f(x[i])`` issues a few tiny ops per iteration (``select``,
``copy_``, ...), each with full dispatch cost and, on a GPU, a kernel launch; one vectorised op
does the same work at once. The recorder attributes each op to the innermost loop running its
line (found with ``ast``), or, when that line runs in no loop, to the loop of the first user line
out from it that calls it (a helper called per element), and counts iterations per step exactly.
"""

from __future__ import annotations

from msgspec import UnsetType

from gpuopt.findings.engine import rule
from gpuopt.findings.estimates import at_least, speedup_if_removed
from gpuopt.findings.evidence import Drift, Model, drift_of, rated, recorder_model
from gpuopt.findings.measures import from_trace, value
from gpuopt.model.profile import Finding, Loop, Profile, Severity
from gpuopt.model.records import given
from gpuopt.units import fmt_count, fmt_frac, fmt_us

MIN_ITERATIONS = 8
MAX_FINDINGS = 5


def _fix(loop: Loop) -> str:
    code = (loop.code if isinstance(loop.code, str) else "").strip()
    where = f" ({code})" if code else ""
    return (
        f"Vectorise the loop{where}: index all elements at once (x[idx] with an index tensor, "
        "torch.gather/index_select, x.unbind() replaced by one batched op), write results with "
        "one op (out = f(x) on the whole tensor, out.index_copy_(0, idx, src)), and replace "
        "per-class or per-element masks by broadcasting, e.g. masks = seg[:, None] == "
        "torch.arange(C, device=seg.device)[None, :, None, None]."
    )


def _finding(e: Loop, drift: Drift, model: Model | None) -> Finding:
    iters = value(e.iterations_per_step)
    ops = value(e.ops_per_step)
    share = value(e.time_share)
    indexing = value(e.indexing_ops_per_step)
    through = [] if isinstance(e.through, UnsetType) else e.through[:3]  # helper lines it calls
    interval, judged = rated(share, given(e.time_share_steps), "loop_share", drift, model=model)
    severity: Severity = judged.severity
    if ops >= 100:
        severity = at_least(severity, "medium")
    summary = (
        f"{fmt_count(iters)} iterations per step, {fmt_count(value(e.ops_per_iteration))} ops "
        f"each ({fmt_count(indexing)} indexing ops per step); "
        f"{fmt_us(value(e.time_us_per_step))} per step ({fmt_frac(share)}) in the loop"
        + (f"; the ops are issued in {', '.join(through)}, called from the loop" if through else "")
    )
    code = e.code if isinstance(e.code, str) and e.code else None
    return Finding(
        id="loop-indexing",
        severity=severity,
        title=f"Python loop: {fmt_count(iters)} iterations and {fmt_count(ops)} small tensor ops "
        "per step",
        site=e.site or "?",
        evidence={
            "summary": summary,
            "iterations_per_step": iters,
            "ops_per_step": ops,
            "indexing_ops_per_step": indexing,
            "loop_us_per_step": value(e.time_us_per_step),
            "loop_share": share,
            **({"code": code} if code else {}),
            **({"through": through} if through else {}),
        },
        fix=_fix(e),
        est_speedup=speedup_if_removed(share, keep=1.0 / iters),
        estimate_model=(
            f"Amdahl: vectorised, the loop costs about one iteration's time "
            f"(1/{fmt_count(iters)} of its measured {fmt_frac(share)} of the step)"
        ),
        interval=interval,
        borderline=judged.borderline,
    )


@rule("loop-indexing", reads=("source", "loops", "utilization", "dispatch", "steps"))
def loop_indexing(profile: Profile) -> list[Finding]:
    if from_trace(profile):
        return []
    loops = [
        e
        for e in profile.loops
        if value(e.iterations_per_step) >= MIN_ITERATIONS
        and value(e.indexing_ops_per_step) >= value(e.iterations_per_step)
    ]
    loops.sort(key=lambda e: (-value(e.time_share), -value(e.ops_per_step), e.site))
    drift = drift_of(profile)
    return [
        _finding(e, drift, recorder_model(profile, value(e.ops_per_step)))
        for e in loops[:MAX_FINDINGS]
    ]
