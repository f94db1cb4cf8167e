"""Findings that do not flicker: N identical runs of every example and corpus script.

    python benchmarks/bench_stability.py [--runs 20] [--only NAME ...] [--gpuopt PATH]
                                         [--json FILE] [--markdown FILE]

Each target (the bundled examples with their default arguments, and every script of the
real-script corpus as benchmarks/bench_corpus.py runs it, on its small offline data) is profiled
``--runs`` times, unchanged, in interleaved rounds (every round runs each target once, the order
rotating), so a neighbour's load falls on all targets alike. For every finding id of a target,
each run's status is the highest severity of its findings of that id that are not borderline,
"borderline" when all of them are, or "absent". The majority status is the target's answer; a
**flip** is a run whose status differs from it, a **HIGH flip** a run that is HIGH where the
majority is not, or not HIGH where it is. The bar: 0 HIGH flips.

It also reports each target's run-to-run drift of the median step time (the standard deviation of
the log of the runs' medians, all runs and the runs gpuopt check takes as quiet), the measurement
``gpuopt check``'s floor for one run a side comes from (docs/check.md), with the load average and
other processes' busy cores of every run.

``--gpuopt`` picks the gpuopt to judge (default: this checkout's .venv/bin/gpuopt); the corpus is
set up as bench_corpus.py sets it up (once, in benchmarks/corpus/.cache).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

EXAMPLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("slow_dataset", ()),
    ("sync_metrics", ()),
    ("segmentation_loops", ()),
    ("index_loops", ()),
    ("io_loader", ()),
    ("ragged_steps", ()),
)
SEVERITIES = ("high", "medium", "low")
# gpuopt check's test of a disturbed run (gpuopt/gate/runs.py), inlined so that any Python runs
# this file: its threads waited >= 5% of their runnable time for a core while other processes kept
# >= a quarter of a core busy; without the wait measured, others kept >= 0.5 core busy
RUN_DELAY_BUSY = 0.05
OTHERS_MIN = 0.25
BUSY_CORES = 0.5


@dataclass
class Target:
    name: str
    command: list[str]  # after "gpuopt profile --quiet --force -o RUN"
    cwd: Path
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))


def example_targets() -> list[Target]:
    return [
        Target(f"examples/{name}", [str(ROOT / "examples" / f"{name}.py"), *args], ROOT)
        for name, args in EXAMPLES
    ]


def corpus_targets(gpuopt: Path) -> list[Target]:
    import bench_corpus as bc
    from corpus_judge import load_expectations

    bc.setup_packages(gpuopt)
    out = []
    for e in load_expectations(bc.EXPECT):
        cwd = bc.prepare(e, gpuopt)
        script = bc.SCRIPTS / e.path
        out.append(
            Target(f"corpus/{e.name}", [*e.gpuopt_args, str(script), *e.args], cwd, bc.run_env(e))
        )
    return out


def profile(gpuopt: Path, target: Target, out: Path) -> dict[str, Any]:
    """One run of the target; what the benchmark keeps of it."""
    cmd = [str(gpuopt), "profile", "--quiet", "--force", "-o", str(out), *target.command]
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, cwd=target.cwd, env=target.env, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - t0
    row: dict[str, Any] = {
        "target": target.name,
        "exit": proc.returncode,
        "wall_s": round(wall, 2),
        "load1": os.getloadavg()[0],
    }
    path = out / "profile.json"
    if not path.exists():
        row["error"] = proc.stderr[-500:]
        return row
    doc = json.loads(path.read_text())
    cpu = doc.get("utilization", {}).get("cpu", {})
    row.update(
        miss=recorder_miss(doc),
        outside=outside_share(doc),
        outside_steps=(doc.get("dispatch") or {}).get("outside_ops_share_steps"),
        # the part of it the gap sampler named at a line
        outside_named=sum(
            s.get("time_share") or 0.0
            for s in (doc.get("dispatch") or {}).get("outside_ops_sites") or []
        ),
        median_s=doc["steps"]["time_s"].get("median"),
        other_cores=cpu.get("other_cores_busy_mean"),
        run_delay=cpu.get("run_delay_share"),
        findings=[
            {
                "id": f["id"],
                "site": f.get("site"),
                "severity": f["severity"],
                "borderline": bool(f.get("borderline", False)),
                "interval": f.get("interval"),
            }
            for f in doc.get("findings", [])
        ],
    )
    return row


def outside_share(doc: dict[str, Any]) -> float | None:
    """The median of the window steps' shares outside tensor ops (gpuopt check's outside-ops
    gate's per-run value)."""
    steps = (doc.get("dispatch") or {}).get("outside_ops_share_steps") or []
    return statistics.median(steps) if steps else None


def recorder_miss(doc: dict[str, Any]) -> float | None:
    """How far the run's estimate of the recorder's cost in its window missed the observed cost,
    ``|1 - estimated / observed|`` (gpuopt.findings.evidence.recorder_miss, inlined)."""
    d, real = doc.get("dispatch") or {}, doc["steps"]["time_s"].get("median")
    per_op, ops, raw = (
        d.get(k) for k in ("recorder_overhead_us_per_op", "ops_per_step", "step_time_us_raw")
    )
    if not all(isinstance(x, (int, float)) for x in (per_op, ops, raw, real)) or real <= 0:
        return None
    estimated, observed = per_op * ops, raw - real * 1e6
    return abs(1.0 - estimated / observed) if estimated > 0 and observed > 0 else None


def status(findings: list[dict[str, Any]], fid: str) -> str:
    """A run's answer for one finding id: its highest severity not borderline, "borderline"
    when every finding of the id is, "absent" without one."""
    mine = [f for f in findings if f["id"] == fid]
    if not mine:
        return "absent"
    firm = [f["severity"] for f in mine if not f["borderline"]]
    if not firm:
        return "borderline"
    return str(min(firm, key=SEVERITIES.index))


def flips(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per finding id of one target: the majority status and how many runs differ."""
    runs = [r for r in rows if "findings" in r]
    ids = sorted({f["id"] for r in runs for f in r["findings"]})
    out = []
    for fid in ids:
        seen = [status(r["findings"], fid) for r in runs]
        counts = Counter(seen)
        majority = max(counts, key=lambda s: (counts[s], -_rank(s)))
        high = majority == "high"
        sites = Counter(f["site"] for r in runs for f in r["findings"] if f["id"] == fid)
        values = evidence_values(runs, fid)
        out.append(
            {
                "id": fid,
                "runs": len(seen),
                "majority": majority,
                "flips": sum(s != majority for s in seen),
                "high_flips": sum((s == "high") != high for s in seen),
                "statuses": dict(counts),
                "sites": dict(sites),
                "evidence_sd": statistics.stdev(values) if len(values) >= 2 else None,
            }
        )
    return out


def evidence_values(runs: list[dict[str, Any]], fid: str) -> list[float]:
    """Each run's largest evidence value of ``fid`` (its interval's value), where it has one: the
    run-to-run spread of these is what the findings' drift term must cover."""
    out = []
    for r in runs:
        vals = [
            f["interval"]["value"] for f in r["findings"] if f["id"] == fid and f.get("interval")
        ]
        if vals:
            out.append(max(vals))
    return out


def _rank(s: str) -> int:
    order = ("high", "medium", "low", "borderline", "absent")
    return order.index(s) if s in order else len(order)


def quiet_run(row: dict[str, Any]) -> bool:
    """Whether ``gpuopt check`` would take the run as quiet (not disturbed by a neighbour)."""
    delay, other = row.get("run_delay"), row.get("other_cores")
    if delay is not None:
        return not (delay >= RUN_DELAY_BUSY and (other or 0.0) >= OTHERS_MIN)
    return other is not None and other < BUSY_CORES


def drift(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Run-to-run spread of the median step time: sd of log(median), all runs and quiet ones."""

    def sd(values: list[float]) -> float | None:
        logs = [math.log(v) for v in values if v and v > 0]
        return statistics.stdev(logs) if len(logs) >= 2 else None

    misses = sorted(r["miss"] for r in rows if r.get("miss") is not None)
    outside = [r["outside"] for r in rows if r.get("outside") is not None and quiet_run(r)]
    named = [r["outside_named"] for r in rows if "outside_named" in r and quiet_run(r)]
    medians = [r["median_s"] for r in rows if r.get("median_s")]
    quiet = [r["median_s"] for r in rows if r.get("median_s") and quiet_run(r)]
    return {
        "median_s": statistics.median(medians) if medians else None,
        "sd_log": sd(medians),
        "sd_log_quiet": sd(quiet),
        "quiet_runs": len(quiet),
        "min_s": min(medians) if medians else None,
        "max_s": max(medians) if medians else None,
        "miss": (statistics.median(misses), misses[0], misses[-1]) if misses else None,
        "outside": (
            statistics.fmean(outside),
            statistics.stdev(outside),
            min(outside),
            max(outside),
        )
        if len(outside) >= 2
        else None,
        "named": (statistics.fmean(named), statistics.stdev(named), min(named), max(named))
        if len(named) >= 2
        else None,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "| target | finding | runs | majority | flips | HIGH flips | statuses seen | evidence sd |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, t in result["targets"].items():
        if not t["findings"]:
            lines.append(f"| {name} | none | {t['runs']} | – | 0 | 0 | – | – |")
        for f in t["findings"]:
            seen = ", ".join(f"{k} {v}" for k, v in sorted(f["statuses"].items(), key=str))
            sd = f.get("evidence_sd")
            spread = f"{sd * 100:.1f}pt" if sd is not None else "–"
            lines.append(
                f"| {name} | `{f['id']}` | {f['runs']} | {f['majority']} | {f['flips']} "
                f"| **{f['high_flips']}** | {seen} | {spread} |"
            )
    lines += [
        "",
        "| target | median step | run-to-run sd (all runs) | sd (quiet runs) | range "
        "| recorder miss: median (range) | outside ops (median step): mean, sd (range) "
        "| outside ops named at a line (the gate's): mean, sd (range) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, t in result["targets"].items():
        d = t["drift"]

        def pct(x: float | None) -> str:
            return f"{x:.1%}" if x is not None else "–"

        rng = (
            f"{d['min_s'] * 1e3:.2f} … {d['max_s'] * 1e3:.2f} ms" if d["min_s"] is not None else "–"
        )
        med = f"{d['median_s'] * 1e3:.2f} ms" if d["median_s"] is not None else "–"
        m = d.get("miss")
        miss = f"{m[0]:.0%} ({m[1]:.0%} … {m[2]:.0%})" if m else "–"
        out, named = (
            f"{o[0]:.1%}, {o[1] * 100:.1f}pt ({o[2]:.1%} … {o[3]:.1%})" if o else "–"
            for o in (d.get("outside"), d.get("named"))
        )
        lines.append(
            f"| {name} | {med} | {pct(d['sd_log'])} | {pct(d['sd_log_quiet'])} "
            f"({d['quiet_runs']} runs) | {rng} | {miss} | {out} | {named} |"
        )
    steady = [
        t["drift"]["sd_log_quiet"]
        for t in result["targets"].values()
        if t["drift"]["sd_log_quiet"] is not None and (t["drift"]["median_s"] or 0) >= 1e-3
    ]
    if steady:
        lines += [
            "",
            f"Largest run-to-run drift over quiet runs, steps of 1 ms or more: "
            f"**{max(steady):.1%}** (gpuopt check's ONE_RUN_DRIFT comes from this).",
        ]
    outside_sd = [
        t["drift"]["named"][1] for t in result["targets"].values() if t["drift"].get("named")
    ]
    if outside_sd:
        from gpuopt.gate.check import OUTSIDE_OPS_DRIFT

        lines += [
            "",
            "Largest run-to-run sd of the share outside tensor ops named at a line, quiet runs: "
            f"**{max(outside_sd) * 100:.1f}pt** (gpuopt check's OUTSIDE_OPS_DRIFT, "
            f"{OUTSIDE_OPS_DRIFT * 100:.0f}pt, should be at least this).",
        ]
    loads = [r["load1"] for r in result["rows"]]
    measured = [r for r in result["rows"] if "median_s" in r]
    busy = sum(not quiet_run(r) for r in measured)
    delays = [r["run_delay"] for r in measured if r.get("run_delay") is not None]
    waited = f"{min(delays):.0%} … {max(delays):.0%}" if delays else "not measured"
    total_high = sum(f["high_flips"] for t in result["targets"].values() for f in t["findings"])
    total = sum(f["flips"] for t in result["targets"].values() for f in t["findings"])
    lines += [
        "",
        f"{result['runs']} runs a target; HIGH flips in all: **{total_high}**; flips of any "
        f"status: {total}. 1-minute load average {min(loads):.2f} … {max(loads):.2f} "
        f"({os.cpu_count()} cores); the runs' threads waited {waited} of their time for a core; "
        f"{busy} of {len(measured)} runs disturbed by gpuopt check's test (waited ≥ "
        f"{RUN_DELAY_BUSY:.0%} while others kept ≥ {OTHERS_MIN} core busy); "
        f"{result['wall_s'] / 60:.1f} min.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--only", action="append", default=[], metavar="NAME")
    ap.add_argument("--gpuopt", type=Path, default=ROOT / ".venv" / "bin" / "gpuopt")
    ap.add_argument("--no-corpus", action="store_true", help="the examples only")
    ap.add_argument("--json", type=Path, help="every run and the summary")
    ap.add_argument("--markdown", type=Path, help="the tables, for docs/benchmarks.md")
    args = ap.parse_args()
    gpuopt = args.gpuopt.absolute()
    targets = example_targets() + ([] if args.no_corpus else corpus_targets(gpuopt))
    if args.only:
        targets = [t for t in targets if any(o in t.name for o in args.only)]
    if not targets:
        raise SystemExit("no target matches --only")
    t0 = time.time()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.runs):
            k = r % len(targets)
            for target in targets[k:] + targets[:k]:
                out = Path(tmp) / target.name.replace("/", "_")
                row = profile(gpuopt, target, out)
                row["round"] = r
                rows.append(row)
                got = [
                    f"{f['id']}:{'~' if f['borderline'] else ''}{f['severity']}"
                    for f in row.get("findings", [])
                ]
                print(
                    f"round {r + 1:2} {target.name:<38} {row['wall_s']:6.1f} s "
                    f"load {row['load1']:.2f} {' '.join(got) or row.get('error', '')[-80:]}",
                    flush=True,
                )
    result: dict[str, Any] = {"runs": args.runs, "rows": rows, "wall_s": time.time() - t0}
    result["targets"] = {
        t.name: {
            "runs": sum(1 for r in rows if r["target"] == t.name),
            "findings": flips([r for r in rows if r["target"] == t.name]),
            "drift": drift([r for r in rows if r["target"] == t.name]),
        }
        for t in targets
    }
    text = markdown(result)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
