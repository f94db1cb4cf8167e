"""The memory model's accuracy: the fake-tensor replay of a script's step against the real step.

    python benchmarks/bench_memory.py [--only NAME ...] [--markdown FILE] [--json FILE]

For each of the project's examples, the memory test script and the public corpus
(benchmarks/corpus: pytorch/examples, run offline on small data as bench_corpus.py runs them),
``benchmarks/memory_truth.py`` runs the script in a child process, measures its second step for
real on the CPU with torch's MemTracker (gpuopt's own tracker where MemTracker refuses the
step), replays the recorded first step under fake tensors at the same batch size with the CPU's
rules, and times what ``--memory-for h100`` costs. The table says how far the replay's peak is
from the real one (the bar: within 5%), what was replayed, and the cost; memory is
counted, not timed, so the load of the machine changes the times only.

The corpus needs bench_corpus.py's set-up (``python benchmarks/bench_corpus.py --setup-only``);
without it the corpus rows say so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

TIMEOUT_S = 600
LIMIT = 0.05  # the bar on the replay's error

# (name, script, args): the project's own scripts that train
OWN: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("sync_metrics", "examples/sync_metrics.py", ()),
    ("slow_dataset", "examples/slow_dataset.py", ()),
    ("segmentation_loops", "examples/segmentation_loops.py", ()),
    ("index_loops", "examples/index_loops.py", ()),
    ("ragged_steps --mode loop", "examples/ragged_steps.py", ("--mode", "loop")),
    ("io_loader", "examples/io_loader.py", ()),
    ("memory_train (tests)", "tests/data/scripts/memory_train.py", ()),
)


def run_case(script: Path, args: list[str], cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "truth.json"
        cmd = [sys.executable, str(HERE / "memory_truth.py"), str(out), str(script), *args]
        try:
            proc = subprocess.run(
                cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            return {"failed": f"timed out after {TIMEOUT_S} s"}
        if not out.exists():
            tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
            return {"failed": f"exit {proc.returncode}: {tail[0][:200]}"}
        return dict(json.loads(out.read_text()))


def own_cases() -> list[tuple[str, Path, list[str], Path, dict[str, str]]]:
    env = dict(os.environ)
    return [(n, ROOT / s, list(a), ROOT, env) for n, s, a in OWN]


def corpus_cases() -> list[tuple[str, Path, list[str], Path, dict[str, str]]]:
    import bench_corpus
    from corpus_judge import load_expectations

    if not (bench_corpus.SITE / ".installed").exists():
        return []
    out = []
    gpuopt = ROOT / ".venv" / "bin" / "gpuopt"
    for e in load_expectations(bench_corpus.EXPECT):
        if not e.trains:
            continue
        cwd = bench_corpus.prepare(e, gpuopt)
        out.append(
            (
                f"corpus {e.name}",
                bench_corpus.SCRIPTS / e.path,
                list(e.args),
                cwd,
                bench_corpus.run_env(e),
            )
        )
    return out


def error(r: dict[str, Any]) -> float | None:
    truth, fake = r.get("truth_peak"), r.get("fake_peak")
    if not truth or fake is None:
        return None
    return (fake - truth) / truth


def mib(n: Any) -> str:
    return "–" if n is None else f"{n / 2**20:.2f}"


def row(name: str, r: dict[str, Any]) -> str:
    if "failed" in r:
        return f"| {name} | – | – | – | – | – | – | – | – | {r['failed']} |"
    e = error(r)
    ok = "–" if e is None else ("yes" if abs(e) <= LIMIT else "**no**")
    notes = [*r.get("notes", [])]
    for key in ("replay_error", "truth_error", "error"):
        if r.get(key):
            notes.append(f"{key}: {r[key]}")
    if r.get("truth_by") and r["truth_by"] != "torch MemTracker":
        notes.append(f"truth: {r['truth_by']}")
    err = "–" if e is None else f"{e * 100:+.2f}%"
    return (
        f"| {name} | {r.get('batch_size') or '–'} | {mib(r.get('truth_peak'))} "
        f"| {mib(r.get('fake_peak'))} | {err} | {ok} | {r.get('fake_s', '–')} "
        f"| {r.get('predict_s', '–')} ({r.get('points', '–')}) | {r.get('max_batch_size', '–')} "
        f"| {r.get('replayed', '')}{'; ' if notes else ''}{'; '.join(notes)} |"
    )


HEAD = (
    "| script | batch | real step peak MiB | fake replay MiB | error | within 5% | one replay s "
    "| --memory-for h100 s (replays) | largest batch on an H100 (est.) | replayed; notes |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--json", type=Path)
    ns = ap.parse_args()
    cases = own_cases() + corpus_cases()
    if ns.only:
        cases = [c for c in cases if any(o in c[0] for o in ns.only)]
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    results: dict[str, Any] = {}
    lines = [HEAD]
    print(HEAD, flush=True)
    for name, script, args, cwd, env in cases:
        r = run_case(script, args, cwd, env)
        results[name] = r
        line = row(name, r)
        lines.append(line)
        print(line, flush=True)
    errs = [abs(e) for r in results.values() if (e := error(r)) is not None]
    summary = (
        f"{sum(1 for e in errs if e <= LIMIT)} of {len(results)} scripts within 5% "
        f"(largest error {max(errs) * 100:.2f}%); load average {' '.join(load)}"
        if errs
        else "no script measured"
    )
    print(summary)
    if ns.markdown:
        ns.markdown.write_text("\n".join(lines) + "\n\n" + summary + "\n")
    if ns.json:
        ns.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
