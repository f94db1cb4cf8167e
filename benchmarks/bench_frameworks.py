"""The framework corpus (benchmarks/frameworks/, docs/frameworks.md): gpuopt profile on each
script, offline, checked against its expectations — the framework recognised, its entry and
settings lines, its phases, the framework's own host reads with the setting that removes them —
and, on the HF Trainer script, the reads before and after that setting is changed by the
framework-knobs codemod. Prints one Markdown table (docs/benchmarks.md).

    python benchmarks/bench_frameworks.py [--steps N]

Needs the `frameworks` extra (transformers, accelerate, datasets); exits 0 with a note without.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "benchmarks" / "frameworks"

# script -> (framework, reads by framework file {file: per step}, the knob named, eval phase)
EXPECTED: dict[str, tuple[str, dict[str, float], str | None, bool]] = {
    "hf_clm_gpt2.py": (
        "transformers",
        {"transformers/trainer.py": 2, "transformers/masking_utils.py": 1},
        "logging_nan_inf_filter",
        False,
    ),
    "hf_bert_classify.py": (
        "transformers",
        {"transformers/trainer.py": 2, "transformers/masking_utils.py": 1},
        "logging_nan_inf_filter",
        True,
    ),
    "accelerate_nlp.py": ("accelerate", {}, None, False),
}


def profile(script: Path, out: Path, steps: int) -> dict:
    cmd = [sys.executable, "-m", "gpuopt", "profile", "--quiet", "--force", "-o", str(out)]
    run = [*cmd, "--steps", str(steps), str(script)]
    subprocess.run(run, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return json.loads((out / "profile.json").read_text())


def reads(doc: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in doc["syncs"]:
        if s.get("library_site"):
            f = s["library_site"].rsplit(":", 1)[0]
            out[f] = out.get(f, 0) + s["count_per_step"]
    return out


def knobs(doc: dict) -> list[str]:
    return [f["evidence"]["knob"]["argument"] for f in doc["findings"] if "knob" in f["evidence"]]


def check(name: str, doc: dict) -> list[str]:
    fw_name, want_reads, knob, evals = EXPECTED[name]
    fw = doc["framework"] or {}
    misses = []
    if fw.get("name") != fw_name:
        misses.append(f"framework {fw.get('name')} != {fw_name}")
    if not fw.get("entry") or not fw.get("settings_at"):
        misses.append("no entry or settings line")
    if reads(doc) != want_reads:
        misses.append(f"reads {reads(doc)} != {want_reads}")
    if knob is not None and knob not in knobs(doc):
        misses.append(f"knob {knob} not named")
    if evals != any(p["name"] == "eval" for p in fw.get("phases", [])):
        misses.append("eval phase")
    return misses


def knob_fixed(doc: dict, tmp: Path, steps: int) -> dict:
    """The HF script with the knob the finding names set by the codemod, profiled again."""
    from gpuopt.optimize.codemods.framework_knobs import rewrite_framework_call

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
    steps = ap.parse_args().steps
    if importlib.util.find_spec("transformers") is None:
        print("bench_frameworks: transformers is not installed (pip install -e '.[frameworks]')")
        return 0
    print("| script | framework | entry | settings | phases | framework reads/step | knob | ok |")
    print("|---|---|---|---|---|---|---|---|")
    failed = 0
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name in EXPECTED:
            doc = profile(CORPUS / name, tmp / f"{name}.run", steps)
            fw = doc["framework"] or {}
            misses = check(name, doc)
            failed += bool(misses)
            phases = ", ".join(f"{p['name']} {p['steps']}" for p in fw.get("phases", []))
            print(
                f"| {name} | {fw.get('name')} {fw.get('version')} | {fw.get('entry')} | "
                f"{fw.get('settings_at')} | {phases} | {reads(doc) or '0'} | "
                f"{', '.join(knobs(doc)) or '–'} | {'yes' if not misses else '; '.join(misses)} |"
            )
            if name == "hf_clm_gpt2.py":
                after = knob_fixed(doc, tmp, steps)
                print(
                    f"| {name} with the knob set | | | | | {reads(after) or '0'} | "
                    f"{', '.join(knobs(after)) or '–'} | |"
                )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
