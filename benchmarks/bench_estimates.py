"""gpuopt's estimates against measured outcomes.

For each case: ``gpuopt profile`` it and read the finding's ``est_speedup``, ``estimate_model``
and ``fix_params``; then apply the fix (through the script's own arguments, or a patched copy of
a vendored script, never the original) and time the training, before and after, in interleaved
pairs with the same arguments and seeds. Only the training is timed: each run executes the script
with ``runpy`` under a timer, so the interpreter and ``import torch`` are left out.

    python benchmarks/bench_estimates.py [--pairs 5] [--only NAME] [--markdown FILE]

Verdicts (:func:`verdict`): the measured speed-up is the median of the per-pair ratios
before/after; the noise is the largest departure from 1 of the ratios of consecutive "before"
runs (the script's own run-to-run floor). A measured gain inside the noise is "no measurable
gain". An estimate is **right** when it lies within the noise of the measured speed-up or below
it (conservative), or when it is 1.0× ("no gain expected") and no gain was measured (a slowdown
included: it does not size the loss); an **over-estimate** otherwise.

The VAE case needs the real-script corpus set up (``python benchmarks/bench_corpus.py
--setup-only``: torchvision and MNIST-shaped data under benchmarks/corpus/.cache); it is skipped
with a note when that is missing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

_TIMER = (
    "import runpy, sys, time\n"
    "path, *args = sys.argv[1:]\n"
    "sys.argv = [path, *args]\n"
    "t = time.perf_counter()\n"
    "runpy.run_path(path, run_name='__main__')\n"
    "print(f'TRAIN_S {time.perf_counter() - t:.4f}', file=sys.stderr)\n"
)


@dataclass
class Case:
    name: str
    script: Path
    args: list[str]
    cwd: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    finding: str = "dataloader-bound"


@dataclass
class Outcome:
    case: str
    finding: str
    est: float | None
    model: str
    fix: dict[str, str]
    before_s: list[float]
    after_s: list[float]
    measured: float | None
    noise: float | None
    verdict: str
    note: str = ""
    other_cores_busy: float | None = None


def verdict(est: float | None, measured: float | None, noise: float | None) -> str:
    """See the module's docstring; ``noise`` is a fraction (0.05: ±5%)."""
    if est is None or measured is None or noise is None:
        return "not measured"
    gain = "no measurable gain" if abs(measured - 1.0) <= noise else "measured gain"
    if measured < 1.0 - noise:
        gain = "measured slowdown"
    # an estimate of no gain (1.0x) is right when no gain was measured, a slowdown included: it
    # claims none and does not size a loss
    right = est <= measured * (1.0 + noise) or (est <= 1.0 and measured <= 1.0 + noise)
    return f"{'right' if right else 'over-estimate'} ({gain})"


def noise_of(before: list[float]) -> float | None:
    if len(before) < 2:
        return None
    return max(abs(a / b - 1.0) for a, b in zip(before, before[1:], strict=False))


def _timed(python: Path, script: Path, args: list[str], cwd: Path, env: dict[str, str]) -> float:
    r = subprocess.run(
        [str(python), "-c", _TIMER, str(script), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    for line in r.stderr.splitlines():
        if line.startswith("TRAIN_S "):
            return float(line.split()[1])
    raise SystemExit(f"{script.name} {' '.join(args)} failed:\n{r.stderr[-2000:]}")


def _profile(gpuopt: Path, case: Case, cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        cmd = [str(gpuopt), "profile", "--quiet", "--force", "-o", str(run)]
        subprocess.run([*cmd, str(case.script), *case.args], cwd=cwd, env=env, check=False)
        doc: dict[str, Any] = json.loads((run / "profile.json").read_text())
    return doc


def _after(case: Case, fix: dict[str, str], tmp: Path) -> tuple[Path, list[str], str]:
    """The script and arguments with the fix applied, and what was done."""
    workers = fix.get("num_workers")
    if workers is None:
        return case.script, case.args, "the finding named no num_workers"
    if case.name.startswith("slow_dataset"):
        return case.script, [*case.args, "--num-workers", workers], f"--num-workers {workers}"
    # a vendored script: a patched copy beside it (its imports and data paths unchanged)
    source = case.script.read_text()
    old = "kwargs = {'num_workers': 1, 'pin_memory': True} if use_accel else {}"
    extra = ", 'persistent_workers': True" if fix.get("persistent_workers") == "True" else ""
    new = f"kwargs = {{'num_workers': {workers}{extra}}}"
    if source.count(old) != 1:
        raise SystemExit(f"{case.script}: the DataLoader kwargs line to patch is not there")
    patched = case.script.with_name("main_after_fix.py")
    patched.write_text(source.replace(old, new))
    return patched, case.args, f"patched copy: {new}"


def measure(case: Case, gpuopt: Path, pairs: int) -> Outcome:
    import os

    env = dict(os.environ) | case.env
    cwd = case.cwd or ROOT
    doc = _profile(gpuopt, case, cwd, env)
    found = [f for f in doc.get("findings") or [] if f["id"] == case.finding]
    other = ((doc.get("utilization") or {}).get("cpu") or {}).get("other_cores_busy_mean")
    if not found:
        return Outcome(case.name, case.finding, None, "", {}, [], [], None, None, "no finding",
                       "the profile has no such finding this run", other)  # fmt: skip
    f = found[0]
    fix = f.get("fix_params") or {}
    python = gpuopt.with_name("python")
    with tempfile.TemporaryDirectory() as tmp:
        script, args, note = _after(case, fix, Path(tmp))
        before, after = [], []
        for _ in range(pairs):
            before.append(_timed(python, case.script, case.args, cwd, env))
            after.append(_timed(python, script, args, cwd, env))
    ratios = [b / a for b, a in zip(before, after, strict=True)]
    measured = statistics.median(ratios)
    noise = noise_of(before)
    return Outcome(
        case.name, case.finding, f.get("est_speedup"), f.get("estimate_model") or "", fix,
        before, after, measured, noise, verdict(f.get("est_speedup"), measured, noise), note,
        other,
    )  # fmt: skip


def cases(only: set[str]) -> tuple[list[Case], list[str]]:
    out = [
        Case("slow_dataset", ROOT / "examples" / "slow_dataset.py", ["--epochs", "3"]),
        Case(
            "slow_dataset_cheap",
            ROOT / "examples" / "slow_dataset.py",
            ["--epochs", "3", "--sample-cost-ms", "0.3", "--batch-size", "64", "--samples", "1280"],
        ),
    ]
    notes = []
    import bench_corpus
    from corpus_judge import parse_expectations

    expectations = parse_expectations(bench_corpus.EXPECT.read_text())
    vae = next(e for e in expectations if e.name == "vae")
    if (bench_corpus.SITE / ".installed").exists():
        cwd = bench_corpus.prepare(vae, ROOT / ".venv" / "bin" / "gpuopt")
        script = cwd / "main.py"  # a copy in the work folder, so the patched one sits beside it
        script.write_text((bench_corpus.SCRIPTS / vae.path).read_text())
        out.append(Case("vae", script, ["--epochs", "2"], cwd, bench_corpus.run_env(vae)))
    else:
        notes.append("vae skipped: run `python benchmarks/bench_corpus.py --setup-only` first")
    return [c for c in out if not only or c.name in only], notes


_KINDS = (
    ("dataloader-bound", "yes: the cases above (the fix runs on the CPU)"),
    ("launch-bound", "no: the gain is GPU launch time (GPU-only, not measured here)"),
    ("sync-in-step", "no: not estimated on a CPU-only run (bounded by the GPU work queued)"),
    (
        "pageable-h2d / blocking copies",
        "no: pinned memory needs CUDA (GPU-only, not measured here)",
    ),
    ("loop-indexing", "not yet: the vectorize fix's gains (bench_vectorize.py) not set against it"),
    ("ragged-batches", "not yet: likewise (padding, padding-batch: bench_padding.py)"),
)


def markdown(outcomes: list[Outcome], notes: list[str]) -> str:
    lines = [
        "| case | finding | estimate | fix applied | measured (median of pairs) | noise | "
        "other cores busy | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        est = f"{o.est:.2f}×" if o.est is not None else "–"
        meas = f"{o.measured:.2f}×" if o.measured is not None else "–"
        noise = f"±{o.noise:.0%}" if o.noise is not None else "–"
        other = f"{o.other_cores_busy:.2f}" if o.other_cores_busy is not None else "–"
        lines.append(
            f"| {o.case} | `{o.finding}` | {est} | {o.note} | {meas} | {noise} | {other} | "
            f"{o.verdict} |"
        )
    lines += ["", "| finding kind | checked by a CPU measurement here? |", "|---|---|"]
    lines += [f"| `{k}` | {why} |" for k, why in _KINDS]
    lines += [f"\n{n}" for n in notes]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--gpuopt", type=Path, default=ROOT / ".venv" / "bin" / "gpuopt")
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args()
    todo, notes = cases(set(args.only))
    outcomes = []
    for case in todo:
        print(f"== {case.name}", flush=True)
        o = measure(case, args.gpuopt, args.pairs)
        print(f"   est {o.est} measured {o.measured} noise {o.noise}: {o.verdict}", flush=True)
        outcomes.append(o)
    text = markdown(outcomes, notes)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


if __name__ == "__main__":
    main()
