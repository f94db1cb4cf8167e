"""The corpus harness: gpuopt on a corpus of real training scripts, judged by hand.

    python benchmarks/bench_corpus.py [--gpuopt PATH] [--only NAME ...] [--json FILE]
                                      [--markdown FILE] [--setup-only]

The corpus is public code, not kept in this repository: set-up copies it byte for byte from local
git snapshots of its repositories (benchmarks/corpus/sources.toml, corpus_sources.py) into
benchmarks/corpus/.cache/ (git-ignored): pytorch/examples' and nanoGPT's scripts into
.cache/scripts/, the others into the folder each runs in (corpus/README.md says from where).
For each script of benchmarks/corpus/expect.toml this runs

    gpuopt profile --force -o RUN [GPUOPT_ARGS] SCRIPT ARGS

in a scratch folder holding the script's data (benchmarks/corpus/.cache/work/NAME/cwd), reads
RUN/profile.json and judges it against the expectation with corpus_judge.judge: run ended as
expected, steps found in a script that trains, by the expected marker, the recorded window inside
training, every per-step sync site found, each finding right or not, no false HIGH. It prints a
table, writes the verdicts as JSON (default benchmarks/corpus/.cache/results.json) and, with
--markdown, a table to paste into docs/benchmarks.md.

Set-up, done once and kept in benchmarks/corpus/.cache (git-ignored), never part of gpuopt or its
test dependencies: torchvision and Pillow (and matplotlib for time_sequence_prediction) are
installed with ``pip install --no-deps --target .cache/site`` by the Python of the gpuopt under
test. The torchvision wheel carries C++ operators built for a CUDA torch; on a CPU torch
corpus/shim/sitecustomize.py (first on the runs' PYTHONPATH) defines the two operator schemas
torchvision's Python registers fakes for, so its datasets, transforms, models and utils import
(the shim's docstring says how). Data are made here, small and deterministic: MNIST as raw idx
files (2,000 train / 500 test images), a wikitext-2-shaped text, the sine waves by
time_sequence_prediction's own generator with smaller sizes; dcgan uses ``--dataset fake``,
imagenet ``--dummy``, regression makes its own.

``--gpuopt`` (default: this checkout's .venv/bin/gpuopt) picks the gpuopt to judge, so the same
corpus re-runs against any branch's venv.

``--optimize`` runs ``gpuopt optimize --no-measure`` on each script instead (the
baseline run, the DataLoader sweep when it is called for, the loop checks; no candidate runs)
and says, for each finding of the baseline, whether a fix was applied to it, refused with a
reason, or whether no fix exists (corpus_fixes.coverage); JSON in .cache/fixes.json unless
--json, the Markdown table with --markdown. Run it with two gpuopts (``--gpuopt``) for a
before/after table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import corpus_data
from corpus_fixes import FindingFix, counts, coverage
from corpus_judge import ScriptExpect, Verdict, judge, load_expectations
from corpus_sources import SNAPSHOTS, Missing, load_sources, materialize, scripts_tree

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPUS = HERE / "corpus"
EXPECT = CORPUS / "expect.toml"
SOURCES = CORPUS / "sources.toml"
SHIM = CORPUS / "shim"
CACHE = CORPUS / ".cache"
SITE = CACHE / "site"
WORK = CACHE / "work"
FETCHED = CACHE / "sources"
# the scripts expect.toml names without a source (sources.toml's `scripts`), made by setup_scripts
SCRIPTS = CACHE / "scripts"

# What the corpus's scripts import beyond torch and numpy, pinned; installed without
# dependencies (numpy and torch are the venv's own). torchvision 0.28 is the one for torch 2.13.
PACKAGES = (
    "torchvision==0.28.0",
    "pillow==13.0.0",
    "matplotlib==3.11.2",
    "contourpy==1.3.3",
    "cycler==0.12.1",
    "fonttools==4.68.0",
    "kiwisolver==1.5.1",
    "pyparsing==3.3.3",
    "python-dateutil==4.0.0",
    "six==1.17.0",
)
MNIST_TRAIN, MNIST_TEST = 2000, 500
CIFAR_TRAIN, CIFAR_TEST = 2000, 400
CHARS = 100_000  # chargpt's input.txt
WIKITEXT_TRAIN_LINES, WIKITEXT_EVAL_LINES = 800, 100
# time_sequence_prediction/generate_sine_wave.py makes 100 waves of 1,000 points; 2 LBFGS steps
# of train.py on them take 300 s here. The same generator, run with these sizes, keeps its maths.
SINE_SIZES = {"L = 1000": "L = 100", "N = 100": "N = 20"}


def python_of(gpuopt: Path) -> Path:
    return gpuopt.parent / "python"


def setup_packages(gpuopt: Path) -> None:
    """Install PACKAGES into SITE once (a marker file records what was installed)."""
    marker = SITE / ".installed"
    want = "\n".join(PACKAGES)
    if marker.exists() and marker.read_text() == want:
        return
    SITE.mkdir(parents=True, exist_ok=True)
    cmd = [str(python_of(gpuopt)), "-m", "pip", "install", "-q", "--no-deps", "--upgrade"]
    subprocess.run([*cmd, "--target", str(SITE), *PACKAGES], check=True)
    marker.write_text(want)


def run_env(expect: ScriptExpect, cwd: Path) -> dict[str, str]:
    env = dict(os.environ)
    own = [str(cwd / p) for p in expect.pythonpath]
    paths = [*own, str(SHIM), str(SITE), *filter(None, [env.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["MPLBACKEND"] = "Agg"
    env.update(expect.env)
    return env


def setup_scripts(snapshots: Path = SNAPSHOTS) -> dict[str, str]:
    """Copy the scripts tree into SCRIPTS from the snapshots; returns what is missing (source
    name -> why)."""
    return scripts_tree(load_sources(SOURCES), snapshots, SCRIPTS)


def script_of(expect: ScriptExpect) -> Path:
    """The script a run starts: under SCRIPTS, or its source's copy in the folder it runs in."""
    if expect.source is None:
        return SCRIPTS / expect.path
    return WORK / expect.name / "cwd" / expect.path


def copy_source(expect: ScriptExpect, cwd: Path, snapshots: Path) -> None:
    """The source's files (sources.toml), checked and copied from its snapshot once, into the
    run's folder afresh: the script runs from its repository's root, as its README runs it."""
    import shutil

    assert expect.source is not None
    sources = load_sources(SOURCES)
    if expect.source not in sources:
        raise SystemExit(f"expect.toml: {expect.name}: no source {expect.source!r} in {SOURCES}")
    fetched = materialize(sources[expect.source], snapshots, FETCHED / expect.source)
    shutil.copytree(fetched, cwd, dirs_exist_ok=True)


def prepare(expect: ScriptExpect, gpuopt: Path, snapshots: Path = SNAPSHOTS) -> Path:
    """A fresh working folder for the script with its data; returns the folder to run in."""
    base = WORK / expect.name
    cwd = base / "cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    if expect.source is not None:
        copy_source(expect, cwd, snapshots)
    else:
        missing = setup_scripts(snapshots)
        if not (SCRIPTS / expect.path).is_file():
            raise Missing("; ".join(missing.values()) or f"{expect.path}: in no source's scripts")
    prepare_data(expect, base, cwd, gpuopt)
    return cwd


def prepare_data(expect: ScriptExpect, base: Path, cwd: Path, gpuopt: Path) -> None:
    """The data ``expect.data`` names, where the script reads it (README: Data)."""
    if expect.data in ("mnist", "cifar10", "chars"):
        prepare_images_or_chars(expect.data, base, cwd)
    elif expect.data == "wikitext":
        if not (cwd / "data" / "test.txt").exists():
            corpus_data.write_wikitext(cwd / "data", WIKITEXT_TRAIN_LINES, WIKITEXT_EVAL_LINES)
    elif expect.data == "shakespeare_char":  # nanoGPT reads its config and data from its cwd
        if not (cwd / "data" / "shakespeare_char" / "meta.pkl").exists():
            here = SCRIPTS / Path(expect.path).parent
            prepare = here / "data" / "shakespeare_char" / "prepare.py"
            python = str(python_of(gpuopt))
            corpus_data.write_shakespeare_char(cwd / "data" / "shakespeare_char", prepare, python)
        for name in ("configurator.py", "config/train_shakespeare_char.py"):
            (cwd / name).parent.mkdir(parents=True, exist_ok=True)
            (cwd / name).write_bytes((SCRIPTS / Path(expect.path).parent / name).read_bytes())
    elif expect.data == "sine":
        if not (cwd / "traindata.pt").exists():
            generate_sine(SCRIPTS / Path(expect.path).parent / "generate_sine_wave.py", cwd, gpuopt)
    elif expect.data != "none":
        raise SystemExit(f"expect.toml: {expect.name}: unknown data {expect.data!r}")


def prepare_images_or_chars(data: str, base: Path, cwd: Path) -> None:
    if data == "mnist":  # the scripts read '../data' from where they run ('./data': one)
        if not (base / "data" / "MNIST" / "raw" / corpus_data.MNIST_FILES[0]).exists():
            corpus_data.write_mnist(base / "data", MNIST_TRAIN, MNIST_TEST)
        (cwd / "results").mkdir(exist_ok=True)  # vae saves its images there
        if not (cwd / "data").exists():
            (cwd / "data").symlink_to(Path("..") / "data")
    elif data == "cifar10":  # torchvision's CIFAR10(root='./data')
        if not (cwd / "data" / "cifar-10-batches-py" / "batches.meta").exists():
            corpus_data.write_cifar10(cwd / "data", CIFAR_TRAIN, CIFAR_TEST)
    elif not (cwd / "input.txt").exists():  # minGPT's chargpt reads input.txt where it runs
        (cwd / "input.txt").write_text(corpus_data.play_text(CHARS), encoding="utf-8")


def generate_sine(generator: Path, cwd: Path, gpuopt: Path) -> None:
    source = generator.read_text()
    for old, new in SINE_SIZES.items():
        if source.count(old) != 1:
            raise SystemExit(f"{generator}: expected one {old!r} to resize")
        source = source.replace(old, new)
    subprocess.run([str(python_of(gpuopt)), "-c", source], cwd=cwd, check=True)


def profile_one(
    expect: ScriptExpect, gpuopt: Path, snapshots: Path = SNAPSHOTS
) -> tuple[dict[str, Any] | None, dict]:
    """Run gpuopt on one script; (its profile.json or None, facts about the run)."""
    cwd = prepare(expect, gpuopt, snapshots)
    run_dir = cwd.parent / "run"
    script = script_of(expect)
    cmd = [str(gpuopt), "profile", "--force", "--quiet", "-o", str(run_dir)]
    cmd += [*expect.gpuopt_args, str(script), *expect.args]
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, cwd=cwd, env=run_env(expect, cwd), capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - t0
    (cwd.parent / "stdout.txt").write_text(proc.stdout)
    (cwd.parent / "stderr.txt").write_text(proc.stderr)
    facts = {
        "command": " ".join(["gpuopt", *cmd[1:]]),
        "cwd": str(cwd),
        "returncode": proc.returncode,
        "wall_s": round(wall, 2),
        "traceback": "Traceback (most recent call last)" in proc.stderr,
        "stderr_tail": proc.stderr[-2000:],
    }
    path = run_dir / "profile.json"
    if not path.exists():
        return None, facts
    report = subprocess.run(
        [str(gpuopt), "report", str(run_dir)], capture_output=True, text=True, check=False
    )
    (cwd.parent / "report.txt").write_text(report.stdout + report.stderr)
    return json.loads(path.read_text()), facts


def optimize_one(
    expect: ScriptExpect, gpuopt: Path, snapshots: Path = SNAPSHOTS
) -> tuple[list[FindingFix] | None, dict]:
    """``gpuopt optimize --no-measure`` on one script (plan, loop checks, no candidate runs):
    each baseline finding with the fix applied to it, or why none was."""
    cwd = prepare(expect, gpuopt, snapshots)
    run_dir = cwd.parent / "optimize"
    script = script_of(expect)
    cmd = [str(gpuopt), "optimize", "--no-measure", "--force", "--quiet", "-o", str(run_dir)]
    cmd += [*expect.gpuopt_args, str(script), *expect.args]
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, cwd=cwd, env=run_env(expect, cwd), capture_output=True, text=True, check=False
    )
    facts = {
        "command": " ".join(["gpuopt", *cmd[1:]]),
        "returncode": proc.returncode,
        "wall_s": round(time.perf_counter() - t0, 2),
        "stderr_tail": proc.stderr[-2000:],
    }
    (cwd.parent / "optimize.diff").write_text(proc.stdout)
    doc, base = run_dir / "optimize.json", run_dir / "runs" / "baseline-1" / "profile.json"
    if not doc.exists() or not base.exists():
        return None, facts
    rows = coverage(json.loads(base.read_text()), json.loads(doc.read_text()))
    return rows, facts


def fixes_markdown(results: list[tuple[str, list[FindingFix] | None]]) -> str:
    head = (
        "| script | findings | with an applied fix | refused, with a reason | no fix |\n"
        "|---|---|---|---|---|\n"
    )
    rows, details = [], []
    for name, found in results:
        if found is None:
            rows.append(f"| {name} | optimize failed | | | |")
            continue
        c = counts(found)
        rows.append(f"| {name} | {c['findings']} | {c['fixed']} | {c['refused']} | {c['no fix']} |")
        for f in found:
            why = "; ".join(f.why) or "-"
            site = (f.site or "-").rsplit("/scripts/", 1)[-1]
            details.append(f"| {name} | `{f.id}` {site} | {f.status} | {why} |")
    detail_head = "\n| script | finding | status | what was done, or why not |\n|---|---|---|---|\n"
    return head + "\n".join(rows) + "\n" + detail_head + "\n".join(details) + "\n"


def run_optimize(chosen: list[ScriptExpect], gpuopt: Path, args: argparse.Namespace) -> None:
    results: list[tuple[str, list[FindingFix] | None]] = []
    records = []
    for e in chosen:
        print(f"== {e.name} (optimize): {' '.join(e.args)}", file=sys.stderr, flush=True)
        try:
            found, facts = optimize_one(e, gpuopt, args.snapshots)
        except Missing as exc:
            print(f"   not set up: {exc}", file=sys.stderr, flush=True)
            continue
        print(f"   {facts['wall_s']} s, exit {facts['returncode']}", file=sys.stderr, flush=True)
        results.append((e.name, found))
        records.append(
            {
                "name": e.name,
                "run": facts,
                "findings": [asdict(f) for f in found or []],
                "counts": counts(found) if found is not None else None,
            }
        )
        if found is not None:
            c = counts(found)
            print(
                f"{e.name:<34}{c['findings']:>3} findings {c['fixed']:>3} fixed "
                f"{c['refused']:>3} refused {c['no fix']:>3} without a fix"
            )
            for f in found:
                print(f"    {f.status:<9}{f.id:<18}{f.site or '-'}  {'; '.join(f.why)[:160]}")
    doc = {
        "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "gpuopt": str(gpuopt),
        "load": os.getloadavg(),
        "scripts": records,
    }
    path = args.json if args.json != CACHE / "results.json" else CACHE / "fixes.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\nfix coverage in {path}")
    if args.markdown:
        args.markdown.write_text(fixes_markdown(results))
        print(f"Markdown table in {args.markdown}")


def verdict_json(v: Verdict, facts: dict) -> dict:
    out = asdict(v)
    out.update(
        passed=v.passed,
        findings_right=v.findings_right,
        all_right=v.all_right,
        false_highs=[asdict(f) for f in v.false_highs],
        run=facts,
    )
    return out


def missing_run(expect: ScriptExpect, facts: dict) -> Verdict:
    return Verdict(
        name=expect.name,
        status="no profile.json",
        exit_code=facts["returncode"],
        exit_ok=False,
        steps=0,
        steps_ok=not expect.trains,
        marked_by=(),
        marker_ok=expect.marker is None,
        window_ok=False,
        syncs_found=(),
        syncs_missing=tuple(str(p) for p in expect.sync_sites),
        findings=(),
        missing_findings=(),
        notes=(f"gpuopt exited {facts['returncode']} without a profile.json",),
    )


def yes(ok: bool) -> str:
    return "yes" if ok else "**NO**"


def finding_cell(v: Verdict) -> str:
    parts = []
    for f in v.findings:
        mark = "" if f.verdict == "right" else f" **{f.verdict}**"
        parts.append(f"`{f.id}` {f.severity.upper()} {f.site or '-'}{mark}")
    return "<br>".join(parts) or "none"


def markdown(verdicts: list[Verdict]) -> str:
    head = (
        "| script | passed | all right | exit | steps (marker) | window | per-step syncs found "
        "| false HIGH | findings (severity, site, verdict) | notes |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for v in verdicts:
        steps = f"{v.steps} ({', '.join(v.marked_by) or '-'})" + ("" if v.steps_ok else " **NO**")
        if not v.marker_ok:
            steps += " **wrong marker**"
        total = len(v.syncs_found) + len(v.syncs_missing)
        syncs = f"{len(v.syncs_found)}/{total}" + (
            f" missing {', '.join(v.syncs_missing)}" if v.syncs_missing else ""
        )
        rows.append(
            f"| {v.name} | {yes(v.passed)} | {yes(v.all_right)} | {v.status} {v.exit_code} "
            f"| {steps} | {yes(v.window_ok)} | {syncs} | {len(v.false_highs) or 'none'} "
            f"| {finding_cell(v)} | {'; '.join(v.notes)} |"
        )
    return head + "\n".join(rows) + "\n"


def text_table(verdicts: list[Verdict]) -> str:
    lines = [
        f"{'script':<26}{'pass':<6}{'all':<5}{'exit':<10}{'steps':<8}{'window':<8}{'syncs':<8}"
        f"{'falseHIGH':<11}{'wrong':<7}notes"
    ]
    for v in verdicts:
        total = len(v.syncs_found) + len(v.syncs_missing)
        lines.append(
            f"{v.name:<26}{'yes' if v.passed else 'NO':<6}{'yes' if v.all_right else 'NO':<5}"
            f"{v.status + ' ' + str(v.exit_code):<10}"
            f"{v.steps if v.steps_ok else str(v.steps) + '!':<8}{'ok' if v.window_ok else 'NO':<8}"
            f"{f'{len(v.syncs_found)}/{total}':<8}{len(v.false_highs):<11}"
            f"{len(v.wrong_findings):<7}{'; '.join(v.notes)}"
        )
        for f in v.findings:
            lines.append(f"    {f.verdict:<15}{f.severity:<7}{f.id:<18}{f.site or '-'}")
        for s in v.syncs_missing:
            lines.append(f"    {'sync missing':<15}{'':<7}{'':<18}{s}")
        for m in v.missing_findings:
            lines.append(f"    {'missing':<15}{'':<7}{m}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpuopt", type=Path, default=ROOT / ".venv" / "bin" / "gpuopt")
    ap.add_argument("--only", action="append", default=[], metavar="NAME")
    ap.add_argument("--json", type=Path, default=CACHE / "results.json")
    ap.add_argument("--markdown", type=Path, help="also write the table as Markdown here")
    ap.add_argument("--setup-only", action="store_true", help="install packages, make data, stop")
    ap.add_argument(
        "--snapshots",
        type=Path,
        default=SNAPSHOTS,
        help="folder of git snapshots of sources.toml's repositories (OWNER+NAME/...)",
    )
    ap.add_argument(
        "--optimize",
        action="store_true",
        help="run gpuopt optimize --no-measure instead: which findings get an applied fix",
    )
    args = ap.parse_args()
    gpuopt = args.gpuopt.absolute()  # not resolved: a venv's bin/python is a symlink
    if not gpuopt.exists():
        raise SystemExit(f"no gpuopt at {gpuopt} (make .venv/.installed, or --gpuopt PATH)")
    expects = load_expectations(EXPECT)
    unknown = set(args.only) - {e.name for e in expects}
    if unknown:
        raise SystemExit(f"--only: no script named {', '.join(sorted(unknown))} in {EXPECT}")
    chosen = [e for e in expects if not args.only or e.name in args.only]
    setup_packages(gpuopt)
    if args.setup_only:
        for e in chosen:
            try:
                prepare(e, gpuopt, args.snapshots)
            except Missing as exc:
                print(f"{e.name}: not set up: {exc}", file=sys.stderr)
        return
    if args.optimize:
        run_optimize(chosen, gpuopt, args)
        return
    verdicts, records = [], []
    for e in chosen:
        print(f"== {e.name}: {' '.join(e.args)}", file=sys.stderr, flush=True)
        try:
            profile, facts = profile_one(e, gpuopt, args.snapshots)
        except Missing as exc:
            print(f"   not set up: {exc}", file=sys.stderr, flush=True)
            continue
        script_dir = str(script_of(e).parent if e.source is None else WORK / e.name / "cwd")
        v = judge(e, profile, script_dir) if profile is not None else missing_run(e, facts)
        print(f"   {facts['wall_s']} s, exit {facts['returncode']}", file=sys.stderr, flush=True)
        verdicts.append(v)
        records.append(verdict_json(v, facts))
    print(text_table(verdicts))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "gpuopt": str(gpuopt),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "passed": sum(v.passed for v in verdicts),
        "scripts": records,
    }
    args.json.write_text(json.dumps(doc, indent=1) + "\n")
    right = sum(v.all_right for v in verdicts)
    print(f"\n{doc['passed']}/{len(verdicts)} passed, {right} all right; verdicts in {args.json}")
    if args.markdown:
        args.markdown.write_text(markdown(verdicts))
        print(f"Markdown table in {args.markdown}")


if __name__ == "__main__":
    main()
