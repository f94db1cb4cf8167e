"""``gpuopt check CANDIDATE --baseline BASELINE``: load both runs, gate, print, exit 0/1/2."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from gpuopt.errors import GpuoptError
from gpuopt.gate.check import Gate, Thresholds, evaluate, exit_code

_MARK = {"pass": "ok", "fail": "FAIL", "inconclusive": "??", "not measured": "–"}


def render_text(gates: list[Gate], code: int) -> str:
    width = max(len(g.metric) for g in gates)
    lines = []
    for g in gates:
        row = (
            f"{_MARK.get(g.verdict, g.verdict):<4} {g.metric:<{width}}  "
            f"{g.baseline:>9} → {g.candidate:<9} {g.change:>8}"
        )
        if g.detail:
            row += f"   {g.detail}"
        if g.site:
            row += f"   at {g.site}"
        lines.append(row.rstrip())
    failed = [g.metric for g in gates if g.verdict == "fail"]
    unsure = [g.metric for g in gates if g.verdict == "inconclusive"]
    if failed:
        lines.append(f"REGRESSION: {', '.join(failed)}")
    elif code:
        lines.append(f"INCONCLUSIVE (--strict): {', '.join(unsure)}")
    else:
        lines.append("PASS" + (f" (inconclusive: {', '.join(unsure)})" if unsure else ""))
    return "\n".join(lines) + "\n"


def render_json(gates: list[Gate], code: int) -> str:
    doc = {"schema": "gpuopt.check/1", "exit_code": code, "gates": [asdict(g) for g in gates]}
    return json.dumps(doc, indent=2) + "\n"


def check_command(
    candidate: Path, baseline: Path, th: Thresholds, *, strict: bool, fmt: str
) -> int:
    """The exit code: 0 pass, 1 regression; bad input raises GpuoptError (exit 2)."""
    from gpuopt.loading import load

    if fmt not in ("text", "json"):
        raise GpuoptError(f"gpuopt check prints text or json, not {fmt!r}")
    base, cand = load(baseline), load(candidate)
    if (base.source == "trace") != (cand.source == "trace"):
        raise GpuoptError(
            f"{candidate} and {baseline}: one is a trace and the other a profiled run; compare "
            "like with like"
        )
    gates = evaluate(base, cand, th)
    code = exit_code(gates, strict)
    sys.stdout.write(render_text(gates, code) if fmt == "text" else render_json(gates, code))
    return code
