"""Records the documents and renderings that tests/test_golden.py compares gpuopt against.

The recordings are what users see; they are re-recorded only on purpose, when an output is meant
to change (say why in the commit), so a refactor that changes them fails tests/test_golden.py.
Nothing here is hand-made: every file is gpuopt's own output.

    python tests/data/golden/record.py   # from the repository root
    python tests/data/golden/record.py runs ddp_gloo   # only these runs

What it writes (all gzip-compressed, to keep the repository small):

* ``traces/<name>.json.gz``: ``gpuopt report TRACE --format json`` of every trace and trace folder
  under tests/data/shared/traces (the public ones put in place by tests/public_data.py; timing
  keys ``trace.load_s``/``trace.analyze_s`` set to 0), run from this folder, where
  ``../shared/traces/<rel>`` is the input's path (a document names its input as given);
  ``traces/errors.json``: the one-line message of inputs gpuopt refuses;
* ``render/<doc>.<fmt>.gz``: text, md and html renderings of the hand-made report fixtures
  (tests/data/report) and of some recorded trace documents;
* ``runs/<name>.json.gz``: ``profile.json`` of real runs of the bundled examples and test scripts
  (their numbers vary from run to run; the test compares structure, counts and findings).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
SHARED = ROOT / "tests" / "data" / "shared" / "traces"
FIXTURES = ROOT / "tests" / "data" / "report"

# Trace folders (one job's per-rank traces) besides every single file.
TRACE_FOLDERS = ("hta/trace_filter",)
# Trace documents also rendered in every format (the rest are checked as JSON only).
RENDERED_TRACES = (
    "hta__trace_filter",
    "hta__nccl_parser_config__nccl_data",
    "hta__critical_path__alexnet__benchmark_result_2869224_1695835535_trace",
    "hta__cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace",
    "kineto_tb_plugin__samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace",
)
FIXTURE_NAMES = (
    "cpu_dataloader_bound",
    "host_culprits",
    "gpu_ranks",
    "failed_run",
    "trace_tables",
    "hostile",
)
FORMATS = ("text", "md", "html")
# (name, gpuopt profile arguments): real runs; each test compares against these.
RUNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("slow_dataset", ("examples/slow_dataset.py",)),
    ("segmentation_loops", ("examples/segmentation_loops.py",)),
    ("manual_steps", ("tests/data/scripts/manual_steps.py",)),
    ("raises", ("tests/data/scripts/raises.py",)),
    ("ddp_gloo", ("--nproc-per-node", "2", "tests/data/scripts/ddp_gloo.py")),
    # a planted straggler (rank 1 sleeps 20 ms a step), two micro-batches per optimizer step
    # each all-reducing (no no_sync): straggler-rank and gradient-accumulation-sync
    (
        "ddp_straggler",
        (
            "--nproc-per-node",
            "2",
            "tests/data/scripts/ddp_straggler.py",
            "--steps",
            "16",
            "--accumulate",
            "2",
        ),
    ),
)


def trace_name(rel: str) -> str:
    """``hta/nccl_parser_config/nccl_data.json.gz`` → ``hta__nccl_parser_config__nccl_data``."""
    return re.sub(r"\.json(\.gz)?$", "", rel).replace("/", "__")


def trace_inputs() -> list[str]:
    files = sorted(
        str(p.relative_to(SHARED))
        for p in SHARED.rglob("*.json*")
        if "reference" not in p.parts and p.name.endswith((".json", ".json.gz"))
    )
    return files + [f for f in TRACE_FOLDERS if (SHARED / f).is_dir()]


def trace_arg(rel: str) -> str:
    """How a recorded document names its input: the path from this folder (HERE) to it."""
    return str(Path("..") / "shared" / "traces" / rel)


def gpuopt(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="100")
    return subprocess.run(
        [sys.executable, "-m", "gpuopt", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def zero_timings(doc: dict) -> dict:
    trace = doc.get("trace")
    if isinstance(trace, dict):
        for key in ("load_s", "analyze_s"):
            if key in trace:
                trace[key] = 0
    return doc


def write_gz(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # mtime=0: the same text gives the same bytes, so a re-record shows no spurious change
    with gzip.GzipFile(path, "wb", mtime=0) as fh:
        fh.write(text.encode("utf-8"))


def record_traces() -> None:
    errors: dict[str, str] = {}
    for rel in trace_inputs():
        name = trace_name(rel)
        res = gpuopt("report", trace_arg(rel), "--format", "json", cwd=HERE)
        if res.returncode != 0:
            errors[name] = res.stderr.strip()
            print(f"refused {rel}: {res.stderr.strip()[:100]}")
            continue
        doc = zero_timings(json.loads(res.stdout))
        write_gz(
            HERE / "traces" / f"{name}.json.gz",
            json.dumps(doc, indent=1, ensure_ascii=False) + "\n",
        )
        print(f"recorded {rel}")
    (HERE / "traces" / "errors.json").write_text(
        json.dumps(errors, indent=1, sort_keys=True) + "\n"
    )


def record_renderings() -> None:
    docs = {name: FIXTURES / f"{name}.json" for name in FIXTURE_NAMES}
    with tempfile.TemporaryDirectory() as tmp:
        for name in RENDERED_TRACES:
            p = Path(tmp) / f"{name}.json"
            with gzip.open(HERE / "traces" / f"{name}.json.gz", "rt", encoding="utf-8") as fh:
                p.write_text(fh.read())
            docs[name] = p
        for name, path in docs.items():
            for fmt in FORMATS:
                res = gpuopt("report", str(path), "--format", fmt)
                if res.returncode != 0:
                    raise SystemExit(f"{name} {fmt}: {res.stderr}")
                write_gz(HERE / "render" / f"{name}.{fmt}.gz", res.stdout)
                print(f"rendered {name} as {fmt}")


def record_runs(names: set[str] | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in RUNS:
            if names and name not in names:
                continue
            out = Path(tmp) / name
            res = gpuopt("profile", "--quiet", "-o", str(out), *args)
            doc = json.loads((out / "profile.json").read_text())
            write_gz(
                HERE / "runs" / f"{name}.json.gz",
                json.dumps(doc, indent=1, ensure_ascii=False) + "\n",
            )
            print(f"ran {name}: exit {res.returncode}")


def main() -> None:
    if not SHARED.is_dir():
        raise SystemExit(f"{SHARED} is absent: the trace documents need it")
    parts = {"traces", "render", "runs"}
    only = set(sys.argv[1:]) & parts or parts
    names = set(sys.argv[1:]) - parts
    if "traces" in only:
        record_traces()
    if "render" in only:
        record_renderings()
    if "runs" in only:
        record_runs(names or None)


if __name__ == "__main__":
    main()
