"""``loop-indexing``: a Python loop that indexes tensors element by element inside the step.

``for i in range(n): out[i] = f(x[i])`` issues a few tiny ops per iteration (``select``,
``copy_``, ...), each with full dispatch cost and, on a GPU, a kernel launch; one vectorised op
does the same work at once. The recorder attributes each op to the innermost loop running its
line (found with ``ast``), or, when that line runs in no loop, to the loop of the first user line
out from it that calls it (a helper called per element), and counts iterations per step exactly.
"""

from __future__ import annotations

from typing import Any

from gpuopt.findings.engine import rule
from gpuopt.findings.model import Finding, Severity, severity_for_share, speedup_if_removed
from gpuopt.findings.rules.host_common import at_least, entries, fmt_count, from_trace, num, pct

MIN_ITERATIONS = 8
MAX_FINDINGS = 5


def _fix(loop: dict[str, Any]) -> str:
    code = str(loop.get("code") or "").strip()
    where = f" ({code})" if code else ""
    return (
        f"Vectorise the loop{where}: index all elements at once (x[idx] with an index tensor, "
        "torch.gather/index_select, x.unbind() replaced by one batched op), write results with one "
        "op (out = f(x) on the whole tensor, out.index_copy_(0, idx, src)), and replace per-class or "
        "per-element masks by broadcasting, e.g. masks = seg[:, None] == torch.arange(C, "
        "device=seg.device)[None, :, None, None]."
    )


@rule("loop-indexing")
def loop_indexing(doc: dict[str, Any]) -> list[Finding]:
    if from_trace(doc):
        return []
    findings = []
    loops = [
        e
        for e in entries(doc, "loops")
        if num(e.get("iterations_per_step")) >= MIN_ITERATIONS
        and num(e.get("indexing_ops_per_step")) >= num(e.get("iterations_per_step"))
    ]
    loops.sort(
        key=lambda e: (-num(e.get("time_share")), -num(e.get("ops_per_step")), str(e.get("site")))
    )
    for e in loops[:MAX_FINDINGS]:
        iters = num(e.get("iterations_per_step"))
        ops = num(e.get("ops_per_step"))
        share = num(e.get("time_share"))
        through = [str(t) for t in e.get("through") or []][:3]  # helper lines the loop calls
        severity: Severity = severity_for_share(share)
        if ops >= 100:
            severity = at_least(severity, "medium")
        findings.append(
            Finding(
                id="loop-indexing",
                severity=severity,
                title=f"Python loop: {fmt_count(iters)} iterations and {fmt_count(ops)} small tensor ops per step",
                site=str(e.get("site") or "?"),
                evidence={
                    "summary": (
                        f"{fmt_count(iters)} iterations per step, {fmt_count(num(e.get('ops_per_iteration')))} ops "
                        f"each ({fmt_count(num(e.get('indexing_ops_per_step')))} indexing ops per step); "
                        f"{num(e.get('time_us_per_step')):.0f} µs per step ({pct(share)}) in the loop"
                        + (
                            f"; the ops are issued in {', '.join(map(str, through))}, called from the loop"
                            if through
                            else ""
                        )
                    ),
                    "iterations_per_step": iters,
                    "ops_per_step": ops,
                    "indexing_ops_per_step": num(e.get("indexing_ops_per_step")),
                    "loop_us_per_step": num(e.get("time_us_per_step")),
                    "loop_share": share,
                    **({"code": e["code"]} if e.get("code") else {}),
                    **({"through": through} if through else {}),
                },
                fix=_fix(e),
                est_speedup=speedup_if_removed(share, keep=1.0 / iters),
                estimate_model=(
                    f"Amdahl: vectorised, the loop costs about one iteration's time (1/{fmt_count(iters)} "
                    f"of its measured {pct(share)} of the step)"
                ),
            )
        )
    return findings
