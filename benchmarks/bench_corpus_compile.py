"""The real-script corpus with ``model.compile()`` added: what gpuopt's compile view
finds in scripts nobody here wrote, run once each.

Each script of benchmarks/corpus (pytorch/examples, unchanged) is copied with its folder into
``benchmarks/corpus/.cache/work/NAME-compiled/src/`` and one line is added after the line that
builds (or places) its model: ``model.compile()``, as a user trying torch.compile would write it
(``--backend`` adds ``backend=...``; the default is torch's own, Inductor). Nothing else
changes; the data, arguments and environment are bench_corpus.py's. Then ``gpuopt profile``
runs it and the table says, per script: whether it ran, compile time and its share of the run,
frames and graphs, every graph break (line: kind) and recompile (line: failed guard), the ops
left eager per step, and the compile findings.

    python benchmarks/bench_corpus_compile.py [--only NAME] [--backend inductor|aot_eager|eager]
        [--markdown FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_corpus as bc  # noqa: E402  (bench_corpus.py: data, environment, expectations)
from corpus_judge import load_expectations  # noqa: E402

# script name -> [(a regex matching the whole anchor line, the statement added, "after" or
# "before" the anchor)]; the statement takes the anchor's indentation. Anchors are lines every
# run executes (imagenet's model.to(device) is in a branch a CPU run skips).
INSERTS: dict[str, list[tuple[str, str, str]]] = {
    "mnist": [(r"model = Net\(\)\.to\(device\)", "model.compile({args})", "after")],
    "vae": [(r"model = VAE\(\)\.to\(device\)", "model.compile({args})", "after")],
    "dcgan": [
        (r"netG = Generator\(ngpu\)\.to\(device\)", "netG.compile({args})", "after"),
        (r"netD = Discriminator\(ngpu\)\.to\(device\)", "netD.compile({args})", "after"),
    ],
    "word_language_model": [(r"criterion = nn\.NLLLoss\(\)", "model.compile({args})", "before")],
    "word_language_model_adamw": [
        (r"criterion = nn\.NLLLoss\(\)", "model.compile({args})", "before")
    ],
    "time_sequence_prediction": [(r"seq\.double\(\)", "seq.compile({args})", "after")],
    "time_sequence_prediction_warmup1": [(r"seq\.double\(\)", "seq.compile({args})", "after")],
    "regression": [
        (r"fc = torch\.nn\.Linear\(W_target\.size\(0\), 1\)", "fc.compile({args})", "after")
    ],
    "imagenet": [
        (r"criterion = nn\.CrossEntropyLoss\(\)\.to\(device\)", "model.compile({args})", "before")
    ],
}


def add_compile(source: str, name: str, backend: str | None) -> tuple[str, list[int]]:
    """The script with the compile lines added at their anchors; the added lines (1-based)."""
    args = f'backend="{backend}"' if backend else ""
    lines = source.splitlines(keepends=True)
    added: list[int] = []
    for pattern, stmt, where in INSERTS[name]:
        hits = [i for i, ln in enumerate(lines) if re.fullmatch(rf"\s*{pattern}\s*", ln)]
        if len(hits) != 1:
            raise SystemExit(f"{name}: anchor {pattern!r} found {len(hits)} times")
        i = hits[0]
        indent = re.match(r"\s*", lines[i]).group(0)  # type: ignore[union-attr]
        new = f"{indent}{stmt.format(args=args)}  # added by bench_corpus_compile.py\n"
        at = i if where == "before" else i + 1
        lines.insert(at, new)
        added.append(at + 1)
    return "".join(lines), added


def run_one(expect: Any, gpuopt: Path, backend: str | None) -> dict[str, Any]:
    cwd = bc.prepare(expect, gpuopt)
    base = bc.WORK / f"{expect.name}-compiled"
    src = base / "src"
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree((bc.SCRIPTS / expect.path).parent, src)
    script = src / Path(expect.path).name
    text, added = add_compile(script.read_text(), expect.name, backend)
    script.write_text(text)
    run_dir = base / "run"
    cmd = [str(gpuopt), "profile", "--force", "--quiet", "-o", str(run_dir)]
    cmd += [*expect.gpuopt_args, str(script), *expect.args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=bc.run_env(expect), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    (base / "stderr.txt").write_text(proc.stderr)
    doc = json.loads((run_dir / "profile.json").read_text()) if proc.returncode == 0 else None
    return {"name": expect.name, "exit": proc.returncode, "wall_s": wall, "added": added,
            "doc": doc, "stderr": proc.stderr[-1500:]}  # fmt: skip


def earlier_run(expect: Any) -> dict[str, Any]:
    """What an earlier run left in its run directory (``--table-only``)."""
    path = bc.WORK / f"{expect.name}-compiled" / "run" / "profile.json"
    doc = json.loads(path.read_text()) if path.exists() else None
    status = doc.get("status") if doc else None
    return {"name": expect.name, "exit": doc.get("exit_code") if doc else "no run",
            "wall_s": doc.get("wall_s") if doc else None, "added": [],
            "doc": doc if status == "ok" else None, "stderr": ""}  # fmt: skip


def _line(site: str | None) -> str:
    return site.rsplit(":", 1)[-1] if site else "?"


def row(r: dict[str, Any]) -> list[str]:
    doc = r["doc"]
    if doc is None:
        return [r["name"], f"exit {r['exit']}", "", "", "", "", "", ""]
    c = doc.get("compile")
    if c is None:
        return [r["name"], "ran, nothing compiled", "", "", "", "", "", ""]
    breaks = "; ".join(f"{_line(g['site'])}: {g.get('kind')} ×{g['count']}"
                       for g in c["graph_breaks"]) or "none"  # fmt: skip
    recs = "; ".join(f"{_line(x['site'])}: `{x['guard']}` ×{x['count']}"
                     for x in c["recompiles"]) or "none"  # fmt: skip
    ids = ("graph-break", "recompile", "compile-time-dominates")
    found = sorted({f"{f['id']} ({f['severity']})" for f in doc["findings"] if f["id"] in ids})
    share = c.get("compile_share")
    eager = c.get("eager_ops_per_step")
    return [
        r["name"],
        f"{c['compile_s']:.1f} s + import {c.get('import_s') or 0:.1f} s"
        + (f" ({100 * share:.0f}% of {doc.get('wall_s', 0):.0f} s)" if share is not None else ""),
        f"{c['frames']} / {c['graphs']}",
        breaks,
        recs,
        "—" if eager is None else f"{eager:g}",
        ", ".join(found) or "none",
        ", ".join(doc.get("steps", {}).get("marked_by") or []) + f", {doc['steps']['count']} steps",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpuopt", type=Path, default=bc.ROOT / ".venv" / "bin" / "gpuopt")
    ap.add_argument("--only", action="append", default=[], metavar="NAME")
    ap.add_argument("--backend", default=None, help="torch.compile backend (default: torch's)")
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--json", type=Path, default=bc.CACHE / "results-compiled.json")
    ap.add_argument(
        "--table-only", action="store_true", help="the table of the runs already made, no run"
    )
    a = ap.parse_args()
    expects = [e for e in load_expectations(bc.EXPECT) if not a.only or e.name in a.only]
    results = []
    if not a.table_only:
        bc.setup_packages(a.gpuopt)
    for e in expects:
        if a.table_only:
            results.append(earlier_run(e))
            continue
        print(f"{e.name} ...", file=sys.stderr, flush=True)
        results.append(run_one(e, a.gpuopt, a.backend))
    head = ["script", "compile", "frames / graphs", "graph breaks (line: kind)",
            "recompiles (line: failed guard)", "eager ops/step", "findings", "steps"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row(r)) + " |" for r in results]
    table = "\n".join(lines)
    print(table)
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps([{k: v for k, v in r.items() if k != "doc"} | {
        "compile": (r["doc"] or {}).get("compile"),
        "findings": [f["id"] for f in (r["doc"] or {}).get("findings", [])]} for r in results],
        indent=1))  # fmt: skip
    if a.markdown:
        a.markdown.write_text(table + "\n")


if __name__ == "__main__":
    main()
