"""``gpuopt check``'s false alarms and detection on the bundled slow-DataLoader example (issue 16).

Each pair profiles ``examples/slow_dataset.py`` twice, interleaved, and gates the second run
against the first:

* **identical**: the same arguments both times; every failing pair is a false alarm;
* **planted**: the candidate's samples cost 10% more (``--sample-cost-ms 1.65`` against 1.5):
  the data wait, ~93% of the step here, grows by 10%, so the step time by ~9%; a pair that does
  not fail on step time is a miss (the default threshold is 5%).

    python benchmarks/bench_check.py [--pairs 20] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "slow_dataset.py"
BASE_ARGS = ["--epochs", "2"]


def profile(gpuopt: Path, out: Path, cost_ms: float) -> None:
    cmd = [str(gpuopt), "profile", "--quiet", "--force", "-o", str(out), str(EXAMPLE)]
    subprocess.run([*cmd, *BASE_ARGS, "--sample-cost-ms", str(cost_ms)], check=True,
                   capture_output=True)  # fmt: skip


def check(gpuopt: Path, candidate: Path, baseline: Path) -> dict:
    r = subprocess.run(
        [str(gpuopt), "check", str(candidate), "--baseline", str(baseline), "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode not in (0, 1):
        raise SystemExit(f"gpuopt check failed: {r.stderr}")
    doc: dict = json.loads(r.stdout)
    return doc


def step_gate(doc: dict) -> dict:
    return next(g for g in doc["gates"] if g["metric"] == "step time (median)")


def run_pairs(gpuopt: Path, pairs: int, cost: float) -> list[dict]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        base, cand = Path(tmp) / "base", Path(tmp) / "cand"
        for i in range(pairs):
            profile(gpuopt, base, 1.5)
            profile(gpuopt, cand, cost)
            doc = check(gpuopt, cand, base)
            gate = step_gate(doc)
            out.append({"exit_code": doc["exit_code"], **gate})
            print(f"  pair {i + 1}: exit {doc['exit_code']} {gate['change']} {gate['detail']}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--gpuopt", type=Path, default=ROOT / ".venv" / "bin" / "gpuopt")
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args()
    print("identical pairs")
    same = run_pairs(args.gpuopt, args.pairs, 1.5)
    print("planted 10% slower samples")
    planted = run_pairs(args.gpuopt, args.pairs, 1.65)
    false_alarms = sum(p["exit_code"] == 1 for p in same)
    detected = sum(p["verdict"] == "fail" for p in planted)
    changes = sorted((float(p["change"].rstrip("%")), p["change"]) for p in planted)
    text = (
        "| runs | pairs | failing | step-time change (planted) |\n|---|---|---|---|\n"
        f"| identical | {args.pairs} | **{false_alarms}** (false alarms) | – |\n"
        f"| samples 10% slower | {args.pairs} | **{detected}** (detected) | "
        f"{changes[0][1]} … {changes[-1][1]} |\n"
    )
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
