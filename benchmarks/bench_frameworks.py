"""The framework corpus (benchmarks/frameworks/, docs/frameworks.md): gpuopt profile on each
script, offline, checked against its expectations — the framework recognised, its entry and
settings lines, its phases, the framework's own host reads with the setting that removes them,
and on the Lightning scripts the training step's memory: the recorded step's replay against the
real step (benchmarks/memory_truth.py, within 5%) — and, on the HF Trainer script, the reads
before and after that setting is changed by the framework-knobs codemod. Prints one Markdown
table (docs/benchmarks.md).

    python benchmarks/bench_frameworks.py [--steps N] [--only SCRIPT ...]

Needs the `frameworks` extra (transformers, accelerate, datasets, lightning); a script whose
framework is not installed gets a row saying so. timm's train.py and timm_train.py (the
`frameworks-vision` extra, in .venv-vision) are checked by tests/test_frameworks_timm.py.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "benchmarks" / "frameworks"


@dataclass(frozen=True)
class Expect:
    """A script's expectations: the framework, its reads by framework file a step, the knob a
    finding names, its phases (name -> batches; None: not checked), whether memory_truth.py
    compares the recorded step's replay with the real step (within :data:`LIMIT`), and the
    script's arguments."""

    framework: str
    reads: dict[str, float]
    knob: str | None = None
    phases: dict[str, int] | None = None
    memory: bool = False
    args: tuple[str, ...] = ()
    steps: int | None = None  # gpuopt's steps (None: --steps)


LIMIT = 0.05  # the replay's error on the real step the bar allows

EXPECTED: dict[str, Expect] = {
    "hf_clm_gpt2.py": Expect(
        "transformers",
        {"transformers/trainer.py": 2, "transformers/masking_utils.py": 1},
        "logging_nan_inf_filter",
        {"train": 12},
    ),
    "hf_bert_classify.py": Expect(
        "transformers",
        {"transformers/trainer.py": 2, "transformers/masking_utils.py": 1},
        "logging_nan_inf_filter",
        {"train": 12, "eval": 2},
    ),
    "accelerate_nlp.py": Expect("accelerate", {}, None, {"train": 12}),
    # the default Trainer: the sanity check's 2 batches, then training to max_steps=60
    "lightning_autoencoder.py": Expect(
        "lightning", {}, None, {"sanity-check": 2, "train": 60}, memory=True, steps=60
    ),
    # manual optimization, two optimizers a batch: max_steps=40 is 20 batches; the losses
    # logged to the progress bar are Lightning's 4 reads a step
    "lightning_gan.py": Expect(
        "lightning",
        {"lightning/fabric/utilities/apply_func.py": 4},
        None,
        {"train": 20},
        memory=True,
        steps=20,
    ),
}


# torchvision's CUDA wheel on a CPU torch: Lightning imports it through the corpus's shim
ENV = {
    **os.environ,
    "PYTHONPATH": str(ROOT / "benchmarks" / "corpus" / "shim"),
    "OMP_NUM_THREADS": "1",
}


def profile(script: Path, out: Path, steps: int, memory: bool = False) -> dict:
    cmd = [sys.executable, "-m", "gpuopt", "profile", "--quiet", "--force", "-o", str(out)]
    cmd += ["--memory-for", "h100"] if memory else []
    run = [*cmd, "--steps", str(steps), str(script)]
    subprocess.run(run, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, env=ENV)
    return json.loads((out / "profile.json").read_text())


def memory_truth(script: Path, out: Path) -> dict:
    """benchmarks/memory_truth.py: the recorded step's replay against the real step."""
    cmd = [sys.executable, str(ROOT / "benchmarks" / "memory_truth.py"), str(out), str(script)]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, env=ENV)
    return dict(json.loads(out.read_text()))


def reads(doc: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in doc["syncs"]:
        if s.get("library_site"):
            f = s["library_site"].rsplit(":", 1)[0]
            out[f] = out.get(f, 0) + s["count_per_step"]
    return out


def knobs(doc: dict) -> list[str]:
    return [f["evidence"]["knob"]["argument"] for f in doc["findings"] if "knob" in f["evidence"]]


def check(name: str, doc: dict, truth: dict | None) -> list[str]:
    e = EXPECTED[name]
    fw = doc["framework"] or {}
    misses = []
    if fw.get("name") != e.framework:
        misses.append(f"framework {fw.get('name')} != {e.framework}")
    if not fw.get("entry") or not fw.get("settings_at"):
        misses.append("no entry or settings line")
    if reads(doc) != e.reads:
        misses.append(f"reads {reads(doc)} != {e.reads}")
    if e.knob is not None and e.knob not in knobs(doc):
        misses.append(f"knob {e.knob} not named")
    phases = {p["name"]: p["steps"] for p in fw.get("phases", [])}
    if e.phases is not None and phases != e.phases:
        misses.append(f"phases {phases} != {e.phases}")
    if truth is not None and error(truth) is None:
        misses.append(f"no memory truth ({truth.get('truth_error') or truth.get('replay_error')})")
    elif truth is not None and abs(error(truth) or 0.0) > LIMIT:
        misses.append(f"memory {error(truth):+.2%} of the real step")
    return misses


def error(truth: dict) -> float | None:
    """The replay's error on the real step's peak (None: either is missing)."""
    real, fake = truth.get("truth_peak"), truth.get("fake_peak")
    return fake / real - 1 if real and fake else None


def memory_cell(doc: dict, truth: dict | None) -> str:
    if truth is None:
        return "–"
    predicted = (doc.get("memory") or {}).get("predicted") or {}
    err = error(truth)
    said = f"{err:+.2%}" if err is not None else "?"
    return (
        f"batch {predicted.get('batch_size')}: replay {truth.get('fake_peak')} B, real "
        f"{truth.get('truth_peak')} B ({truth.get('truth_by')}): {said}"
    )


def knob_fixed(doc: dict, tmp: Path, steps: int) -> dict:
    """The HF script with the knob the finding names set by the codemod, profiled again."""
    from gpuopt.fixes.framework_knobs import rewrite_framework_call

    (k,) = [f["evidence"]["knob"] for f in doc["findings"] if "knob" in f["evidence"]]
    path, line = k["site"].rsplit(":", 1)
    (tmp / "fixed-src").mkdir()
    fixed = tmp / "fixed-src" / Path(path).name
    text = (ROOT / path).read_text()
    r = rewrite_framework_call(text, int(line), k["call"], {k["argument"]: k["value"]})
    fixed.write_text(r.source)
    return profile(fixed, tmp / "fixed-run", steps)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--only", nargs="*", default=None, help="scripts to run (default: all)")
    a = ap.parse_args()
    print(
        "| script | framework | entry | settings | phases | framework reads/step | knob | "
        "memory: replay vs real step | ok |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    failed = 0
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name, e in EXPECTED.items():
            if a.only and name not in a.only:
                continue
            if importlib.util.find_spec(e.framework) is None:
                print(
                    f"| {name} | {e.framework} is not installed (pip install -e "
                    "'.[frameworks]') | | | | | | | |"
                )
                continue
            doc = profile(CORPUS / name, tmp / f"{name}.run", e.steps or a.steps, e.memory)
            truth = memory_truth(CORPUS / name, tmp / f"{name}.truth.json") if e.memory else None
            fw = doc["framework"] or {}
            misses = check(name, doc, truth)
            failed += bool(misses)
            phases = ", ".join(f"{p['name']} {p['steps']}" for p in fw.get("phases", []))
            print(
                f"| {name} | {fw.get('name')} {fw.get('version')} | {fw.get('entry')} | "
                f"{fw.get('settings_at')} | {phases} | {reads(doc) or '0'} | "
                f"{', '.join(knobs(doc)) or '–'} | {memory_cell(doc, truth)} | "
                f"{'yes' if not misses else '; '.join(misses)} |"
            )
            if name == "hf_clm_gpt2.py":
                after = knob_fixed(doc, tmp, a.steps)
                print(
                    f"| {name} with the knob set | | | | | {reads(after) or '0'} | "
                    f"{', '.join(knobs(after)) or '–'} | | |"
                )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
