"""``hand-written-op``: a GELU, softmax, layer norm or attention written as a chain of ops where
torch has one op for it.

Each elementwise op of the chain is its own kernel: it reads and writes the whole tensor and, on
a GPU, costs a launch; torch's one op reads the input once (``F.gelu(x, approximate="tanh")`` for
minGPT's 8-op ``NewGELU``, measured 1.21x faster a training step on a 2-core CPU).
The chains are found in the source by their shape (:mod:`gpuopt.fixes.fused_ops`:
the same expression on every operand, so ordinary arithmetic never matches), on the lines whose
ops the recorder counted in its window (``dispatch.hand_written_ops``): a chain the steps never
ran is not reported.

The estimate: the forward ops of the chain's lines, ``time_share`` of the step, become one op
(``1 / n`` of that time kept for an ``n``-op chain); the backward's ops, fewer too, are not
counted. Attention's fused kernel (flash or memory-efficient attention) is a GPU gain; on a CPU
``scaled_dot_product_attention`` runs the same math. ``gpuopt optimize`` measures the rewrite
(``fused-ops``).
"""

from __future__ import annotations

from gpuopt.findings.engine import rule
from gpuopt.findings.estimates import severity_for_share, speedup_if_removed
from gpuopt.findings.measures import from_trace
from gpuopt.model.profile import Finding, HandWrittenOp, Profile
from gpuopt.model.records import given
from gpuopt.units import fmt_count, fmt_frac

# the ops torch dispatches for one call of each hand-written form (its forward)
CHAIN_OPS = {"gelu-tanh": 8, "gelu-erf": 5, "softmax": 4, "layer-norm": 6, "attention": 5}
NAMES = {
    "gelu-tanh": "GELU (tanh approximation)",
    "gelu-erf": "GELU",
    "softmax": "softmax",
    "layer-norm": "layer norm",
    "attention": "attention",
}
GPU_ONLY = {"attention"}


def _finding(h: HandWrittenOp) -> Finding:
    n = CHAIN_OPS.get(h.kind, 2)
    name = NAMES.get(h.kind, h.kind)
    new = h.replacement or "torch's own op"
    gpu = (
        " The fused kernel (flash / memory-efficient attention) is a GPU gain; on a CPU it runs "
        "the same math."
        if h.kind in GPU_ONLY
        else ""
    )
    return Finding(
        id="hand-written-op",
        severity=severity_for_share(h.time_share),
        title=f"{name} written as {n} ops where torch has one: {new}",
        site=h.site,
        evidence={
            "summary": (
                f"{h.code} — {fmt_count(h.ops_per_step)} ops per step on its lines, "
                f"{fmt_frac(h.time_share)} of the step"
            ),
            "kind": h.kind,
            "code": h.code,
            "replacement": h.replacement,
            "ops_per_step": h.ops_per_step,
            "chain_ops": n,
            "time_share": h.time_share,
        },
        fix=(
            f"Replace the expression with {new}: one op (one kernel) instead of {n}, the same "
            f"values up to float rounding.{gpu} gpuopt optimize rewrites it (fused-ops), checks "
            "the training is unchanged and measures it."
        ),
        est_speedup=speedup_if_removed(h.time_share, keep=1.0 / n),
        estimate_model=(
            f"Amdahl: the chain's forward ops ({fmt_frac(h.time_share)} of the step) become one, "
            f"1/{n} of their time kept; the backward's saving not counted"
        ),
        fix_params={"replacement": new, "kind": h.kind},
    )


@rule("hand-written-op", reads=("source", "dispatch"))
def hand_written_op(profile: Profile) -> list[Finding]:
    if from_trace(profile):
        return []
    return [_finding(h) for h in given(profile.dispatch.hand_written_ops) or []]
