"""Benchmark: ``gpuopt report TRACE --format json`` vs HTA 0.5.0's ``TraceAnalysis`` load.

Side by side in one run, on the same files, each tool in its own process. Wall time comes from
*timing runs*, interleaved (gpuopt, HTA, gpuopt, HTA, ...) and not watched by anything. Peak
memory comes from separate *memory runs* (``--memory-runs``, after the timing runs): the larger
of the biggest process's ``ru_maxrss`` and the proportional set size of the whole process tree
sampled every 5 ms, so gpuopt's decode helper counts too, its pages shared with the parent once.
(Sampling reads ``/proc/PID/smaps_rollup``, which walks the process's memory map under its lock:
done during timing runs it added ~8% to gpuopt's 0.25 s runs, measured.) HTA is installed by this
script into its own venv under benchmarks/.work/ (git-ignored). A synthetic large trace (real
events of the ResNet50 trace, replicated and shifted in time) and a small one (its first 2,000
events: each tool's start-up floor) are generated under benchmarks/.work/ as well, never in the
repository.

    python benchmarks/bench_trace.py                 # real traces + a 256 MB synthetic trace
    python benchmarks/bench_trace.py --repeat 5 --without-helper   # + gpuopt with its helper off
    python benchmarks/bench_trace.py --synthetic-mb 1024 --skip-hta-synthetic   # the 1 GB run
    python benchmarks/bench_trace.py --repeat 3 --out benchmarks/.work/bench-trace.json
    # the floor:
    python benchmarks/bench_trace.py --repeat 15 --synthetic-mb 0 --only nccl --only small
    python benchmarks/bench_trace.py --repeat 5 --compare-rev af11cc7   # + gpuopt as of a revision
    # every real trace of 25 MB and more, also written as one line of JSON:
    python benchmarks/bench_trace.py --repeat 5 --synthetic-mb 0 --min-mb 25 --one-line
    # the same traces at a load of 4 more (busy loops), one trace per run:
    python benchmarks/bench_trace.py --busy 4 --memory-runs 0 --synthetic-mb 0 --only xdit_flux
    # parity: HTA's temporal shares and idle split against gpuopt's, the departures apart
    python benchmarks/bench_trace.py --parity --repeat 0 --synthetic-mb 0

Results are printed as a Markdown table (copy into docs/bench-trace.md with the command line).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from installed import USER_VENV, revision_venv, user_venv

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "benchmarks" / ".work"
SHARED = ROOT.parent / "shared" / "traces"
HTA_VENV = WORK / "hta-venv-pandas2"
# HTA 0.5.0's best-working set-up: with pandas 3 it crashes on some traces and is slower
HTA_SPEC = ["HolisticTraceAnalysis==0.5.0", "pandas>=2.2,<3"]
REAL = [
    "hta/df_index_resolver/df_index_resolver.json.gz",
    "hta/trace_diff/control/control.json.gz",
    "hta/trace_diff/test/test.json.gz",
    "kineto_tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "kineto_tb_plugin/samples/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",
    "hta/negative_queue_length_values_check/rank0.json.gz",
    "hta/nccl_parser_config/nccl_data.json.gz",
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    # AMD TraceLens' xDiT Flux.1 capture (MIT): set up by tests/public_data.py (tests/data/shared)
    "tracelens/xdit_flux.1_aiter_sage/capture_trace_rank_0.json.gz",
]
# Where REAL's paths are looked up, in order: ../shared/traces, then the copies tests/public_data.py
# sets up from snapshots (git-ignored).
LOCAL = ROOT / "tests" / "data" / "shared" / "traces"
# Parity only (--parity): small traces HTA's own tests use, each with something the big ones lack
PARITY_ONLY = [
    "hta/triton_example/triton_example.json.gz",
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta/with_gpu_user_annotation/step_based_trace_2543932.json.gz",
    "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    "hta/trace_filter/sampled_rank-0.json.gz",
]
# and TraceLens' DDP ResNet trace whose GPU runs behind the host (set up by tests/public_data.py)
RESNET = ROOT / "tests" / "data" / "public" / "tracelens" / "resnet_act_checkpoint.json.gz"
SEED = "kineto_tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"

_RUNNER = (
    r"""
import json, os, resource, subprocess, sys, threading, time

def tree_pss(pid):
    # Proportional set size summed over the process and its descendants (gpuopt's decode helper
    # included): pages a forked helper shares with its parent count once, not twice as RSS would.
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                total += next(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:"))
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError, StopIteration):
            pass
    return total

t = time.perf_counter()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
peak = [0]
def poll():
    while p.poll() is None:
        peak[0] = max(peak[0], tree_pss(p.pid))
        time.sleep(0.005)
th = threading.Thread(target=poll, daemon=True)
if os.environ.get("BENCH_SAMPLE_MEMORY") == "1":
    th.start()
_, err = p.communicate(timeout=float(os.environ.get("BENCH_TIMEOUT", "1800")))
wall = time.perf_counter() - t
if th.is_alive() or th.ident is not None:
    th.join()
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
"""
    # the runner's last statement, split here only to keep this file's lines within 100 characters
    r'print(json.dumps({"wall_s": wall, "peak_rss_bytes": max(rss, peak[0]), '
    r'"largest_process_rss_bytes": rss,'
    "\n"
    r'                  "tree_pss_sampled_bytes": peak[0], "rc": p.returncode, '
    r'"stderr": err.decode(errors="replace")[-400:]}))'
    "\n"
)


def ensure_hta() -> Path:
    py = HTA_VENV / "bin" / "python"
    if not py.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "venv", str(HTA_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *HTA_SPEC], check=True)
    return py


def reused_revision(rev: str) -> Path | None:
    """The install of ``rev`` an earlier run made, if there is one."""
    sha = subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    bin_dir = WORK / f"user-venv-{sha}" / "bin"
    return bin_dir if sha and (bin_dir / "gpuopt").exists() else None


def measure(
    cmd: list[str], timeout_s: float, extra_env: dict[str, str] | None = None, memory: bool = False
) -> dict:
    """Run ``cmd`` in a fresh child of a fresh runner: wall time and that child's peak RSS
    (``memory``: also sample the process tree's PSS every 5 ms, which slows what it watches)."""
    env = dict(
        os.environ,
        BENCH_TIMEOUT=str(timeout_s),
        BENCH_SAMPLE_MEMORY="1" if memory else "0",
        **(extra_env or {}),
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", _RUNNER, *cmd],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s + 60,
        )
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError) as exc:
        return {
            "wall_s": None,
            "peak_rss_bytes": None,
            "rc": None,
            "stderr": f"{type(exc).__name__}",
        }


def gpuopt_cmd(bin_dir: Path, trace: Path) -> list[str]:
    """The console script of a user-like install (installed.py), as a user types it."""
    return [str(bin_dir / "gpuopt"), "report", str(trace), "--format", "json"]


def hta_cmd(py: Path, trace: Path) -> list[str]:
    tdir = WORK / "hta-dirs" / trace.name.replace(".", "_")
    tdir.mkdir(parents=True, exist_ok=True)
    link = tdir / trace.name
    if not link.exists():
        link.symlink_to(trace.resolve())
    code = (
        "import sys; from hta.trace_analysis import TraceAnalysis; "
        "TraceAnalysis(trace_dir=sys.argv[1])"
    )
    return [str(py), "-c", code, str(tdir)]


def make_small(events: int = 2000) -> Path:
    """The seed trace's first ``events`` events (plus its metadata): a trace so small that the
    time either tool takes on it is its start-up floor (interpreter, imports, set-up)."""
    out = WORK / f"small_{events}ev.pt.trace.json"
    if out.exists():
        return out
    WORK.mkdir(parents=True, exist_ok=True)
    seed = json.loads(gzip.decompress((SHARED / SEED).read_bytes()))
    evs = seed["traceEvents"]
    keep = [e for e in evs if e.get("ph") == "M"] + [e for e in evs if e.get("ph") != "M"][:events]
    doc = {k: v for k, v in seed.items() if k != "traceEvents"}
    doc["traceEvents"] = keep
    out.write_text(json.dumps(doc, indent=1))
    return out


def make_one_line(trace: Path) -> Path:
    """``trace`` written as one line of JSON (``json.dumps``' default separators, not gzipped), as
    several serving frameworks write their traces: the same events, another layout."""
    out = WORK / "one-line" / (trace.name.removesuffix(".gz").removesuffix(".json") + ".json")
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    raw = trace.read_bytes()
    doc = json.loads(gzip.decompress(raw) if trace.name.endswith(".gz") else raw)
    out.write_text(json.dumps(doc))
    return out


def make_synthetic(target_mb: int) -> Path:
    """Replicate the seed trace's events, shifted in time, until the JSON reaches ``target_mb``."""
    out = WORK / f"synthetic_{target_mb}mb.pt.trace.json"
    if out.exists() and out.stat().st_size >= target_mb * 1e6 * 0.95:
        return out
    WORK.mkdir(parents=True, exist_ok=True)
    seed = json.loads(gzip.decompress((SHARED / SEED).read_bytes()))
    events = seed["traceEvents"]
    lines = [json.dumps(e) for e in events if e.get("ph") != "M"]
    meta = [e for e in events if e.get("ph") == "M"]
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(ts) - min(ts) + 1000
    max_corr = (
        max(
            (
                e.get("args", {}).get("correlation", 0)
                for e in events
                if isinstance(e.get("args"), dict)
            ),
            default=0,
        )
        + 1
    )
    step_re = __import__("re").compile(r"ProfilerStep#(\d+)")
    per_copy = sum(len(s) + 4 for s in lines)
    copies = max(1, int(target_mb * 1e6 // per_copy))
    with out.open("w") as fh:
        head = {k: v for k, v in seed.items() if k != "traceEvents"}
        fh.write(
            "{\n"
            + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in head.items())
            + ',\n  "traceEvents": [\n'
        )
        first = True
        for c in range(copies):
            for e in events:
                if e.get("ph") == "M":
                    continue
                e2 = dict(e)
                if isinstance(e2.get("ts"), (int, float)):
                    e2["ts"] = e2["ts"] + c * span
                a = e2.get("args")
                if isinstance(a, dict) and (
                    "correlation" in a or "External id" in a or "external id" in a
                ):
                    a = dict(a)
                    for k in ("correlation", "External id", "external id"):
                        if isinstance(a.get(k), int):
                            a[k] = a[k] + c * max_corr
                    e2["args"] = a
                if isinstance(e2.get("id"), int):
                    e2["id"] = e2["id"] + c * max_corr
                name = e2.get("name")
                if isinstance(name, str) and name.startswith("ProfilerStep#"):
                    e2["name"] = step_re.sub(
                        lambda m, c=c: f"ProfilerStep#{int(m.group(1)) + c * 100}", name
                    )
                fh.write(("" if first else ",\n") + "  " + json.dumps(e2))
                first = False
        for e in meta:
            fh.write(",\n  " + json.dumps(e))
        fh.write("\n  ]\n}\n")
    return out


def text_mb(trace: Path) -> float:
    """The trace's JSON text in MB (decompressed)."""
    if trace.name.endswith(".gz"):
        return len(gzip.decompress(trace.read_bytes())) / 1e6
    return trace.stat().st_size / 1e6


def real_traces(names: list[str] = REAL) -> list[Path]:
    """The traces of ``names`` that are here (../shared/traces first, then the set-up copies)."""
    out = []
    for r in names:
        found = next((base / r for base in (SHARED, LOCAL) if (base / r).exists()), None)
        if found is not None:
            out.append(found)
    return out


def label(tr: Path) -> str:
    """A trace's name in the tables: its path under the trace folders, else in the repository."""
    for base in (SHARED, LOCAL):
        if base in tr.parents:
            return str(tr.relative_to(base))
    return str(tr.relative_to(ROOT))


@contextmanager
def busy_loops(n: int) -> Iterator[None]:
    """``n`` processes spinning in ``while 1: pass`` for the duration: a load of ``n`` on top of
    whatever else runs, made the same way for every run of both tools."""
    procs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(n)]
    try:
        if n:
            time.sleep(2)  # let the load average and the scheduler see them
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


# HTA's temporal breakdown and idle-time split of one trace (its own process, in HTA's venv).
_HTA_PARITY = """
import json, sys
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
t = a.get_temporal_breakdown(visualize=False).iloc[0]
idle = a.get_idle_time_breakdown(ranks=[int(t["rank"])], visualize=False)[0]
split = {k: float(v) for k, v in idle.groupby("idle_category")["idle_time"].sum().items()}
shares = {k: float(t[k + "_time_pctg"]) for k in ("idle", "compute", "non_compute")}
out = {k + "_pct": v for k, v in shares.items()}
out.update(idle_split_us=split, span_us=float(t["kernel_time(us)"]))
print(json.dumps(out))
"""
SPLIT_KEYS = ("host_wait", "kernel_wait", "other")
HOST_CATS = ("cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver")


def host_records_with_stream(tr: Path) -> int:
    """Events of a host category with an integer ``stream`` arg: GPU work for HTA, not gpuopt."""
    raw = tr.read_bytes()
    doc = json.loads(gzip.decompress(raw) if tr.name.endswith(".gz") else raw)
    return sum(
        1
        for e in doc.get("traceEvents", [])
        if e.get("ph") == "X"
        and e.get("cat") in HOST_CATS
        and isinstance((e.get("args") or {}).get("stream"), int)
    )


def split_pct(us: dict[str, float]) -> dict[str, float]:
    total = sum(us.get(k, 0.0) for k in SPLIT_KEYS)
    return {k: 100 * us.get(k, 0.0) / total if total else 0.0 for k in SPLIT_KEYS}


def parity_row(gpuopt_bin: Path, hta_py: Path, tr: Path, timeout: float) -> dict:
    """HTA's and gpuopt's temporal shares and idle split of ``tr`` (rank 0), and what gpuopt
    departs from HTA on: host records with a stream arg, a GPU behind the host."""
    g = subprocess.run(
        [str(gpuopt_bin / "gpuopt"), "report", str(tr), "--format", "json"],
        capture_output=True,
        timeout=timeout,
    )
    h = subprocess.run(
        [str(hta_py), "-c", _HTA_PARITY, str(hta_cmd(hta_py, tr)[-1])],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    row: dict = {"trace": label(tr), "host_records": host_records_with_stream(tr)}
    if g.returncode == 0:
        rank = json.loads(g.stdout)["trace"]["ranks"][0]
        t = rank.get("temporal") or {}
        row["gpuopt"] = {
            "idle_pct": t.get("idle_pct"),
            "compute_pct": t.get("compute_pct"),
            "non_compute_pct": t.get("non_compute_pct"),
            "idle_split": split_pct(rank.get("idle_totals_us") or {}),
            "span_us": t.get("span_us"),
        }
        row["gpu_lag"] = rank.get("gpu_lag")
    if h.returncode == 0:
        got = json.loads(h.stdout.strip().splitlines()[-1])
        got["idle_split"] = split_pct(got.pop("idle_split_us"))
        row["hta"] = got
    else:
        row["hta_error"] = (h.stderr.strip().splitlines() or ["?"])[-1][:120]
    return row


def print_parity(rows: list[dict]) -> None:
    """Parity where gpuopt agrees with HTA, and the departures apart (HTA's number, the right
    one)."""
    print(
        "\n| trace | idle % HTA / gpuopt | compute % | non-compute % | idle split host/kernel/"
        "other % HTA | gpuopt | largest difference (pt) |"
    )
    print("|---|---|---|---|---|---|---|")
    departures = []
    for r in rows:
        h, g = r.get("hta"), r.get("gpuopt")
        if h is None or g is None:
            print(f"| {r['trace']} | HTA: {r.get('hta_error', '—')} | | | | | |")
            continue
        shares = ("idle_pct", "compute_pct", "non_compute_pct")
        diffs = [abs(h[k] - (g[k] or 0.0)) for k in shares]
        diffs += [abs(h["idle_split"][k] - g["idle_split"][k]) for k in SPLIT_KEYS]
        hs = "/".join(f"{h['idle_split'][k]:.2f}" for k in SPLIT_KEYS)
        gs = "/".join(f"{g['idle_split'][k]:.2f}" for k in SPLIT_KEYS)
        cells = " | ".join(f"{h[k]:.2f} / {(g[k] or 0.0):.2f}" for k in shares)
        records = f"{r['host_records']} host record{'s' if r['host_records'] != 1 else ''}"
        note = f" (departure: {records})" if r["host_records"] else ""
        busy = (
            f"busy {100 - h['idle_pct']:.2f}% of {h['span_us'] / 1e3:.3g} ms | busy "
            f"{100 - (g['idle_pct'] or 0.0):.2f}% of {(g['span_us'] or 0.0) / 1e3:.3g} ms"
        )
        if r["host_records"]:
            departures.append(
                f"| {r['trace']} | host spans moved aside: {records} with a stream arg | {busy} |"
            )
        note += " (departure: GPU behind the host)" if r.get("gpu_lag") else ""
        print(f"| {r['trace']} | {cells} | {hs} | {gs} | {max(diffs):.2f}{note} |")
        lag = r.get("gpu_lag")
        if lag:
            hta_busy, ours = busy.split(" | ")
            departures.append(
                f"| {r['trace']} | GPU behind the host: {lag['queued_before']} GPU events "
                f"queued before the trace, lag {lag['lag_min_us'] / 1e3:.1f}–"
                f"{lag['lag_max_us'] / 1e3:.1f} ms | steps from the host annotation (median "
                f"{lag['host_step_us'] / 1e3:.2f} ms): {hta_busy} | steps by what each "
                f"launched (the GPU's cadence, {lag['gpu_step_us'] / 1e3:.2f} ms): {ours} |"
            )
    if departures:
        print("\n| trace | departure | HTA | gpuopt (right) |\n|---|---|---|---|")
        print("\n".join(departures))


def print_table(results: list[dict], without_helper: bool, rev: str | None) -> None:
    """The results as a Markdown table (copy into docs/bench-trace.md with the command)."""
    solo = (" gpuopt s, no helper |" if without_helper else "") + (
        f" gpuopt s at {rev} | peak MB at {rev} |" if rev else ""
    )
    print(
        f"\n| trace | JSON MB | gpuopt s (median; min) |{solo} HTA load s (median; min) "
        "| speedup (medians; mins) | gpuopt peak RSS MB | HTA peak RSS MB | RSS ratio |"
    )
    print("|---|---|---|---|---|---|---|---|" + "---|" * solo.count("|"))
    for r in results:
        f = lambda x, nd=2: "—" if x is None else f"{x:.{nd}f}"  # noqa: E731
        s = (f" {f(r['gpuopt_no_helper_s'])} |" if without_helper else "") + (
            f" {f(r['gpuopt_rev_s'])} | {f(r['gpuopt_rev_rss_mb'], 0)} |" if rev else ""
        )
        print(
            f"| {r['trace']} | {r['json_mb']} | {f(r['gpuopt_s'])}; {f(r['gpuopt_min_s'])} |{s} "
            f"{f(r['hta_s'])}; {f(r['hta_min_s'])} | {f(r['speedup'], 1)}; "
            f"{f(r['speedup_of_mins'], 1)} | {f(r['gpuopt_rss_mb'], 0)} | {f(r['hta_rss_mb'], 0)} "
            f"| {f(r['rss_ratio'], 2)} |"
        )


def time_traces(
    args: argparse.Namespace,
    traces: list[Path],
    gpuopt_bin: Path,
    rev_bin: Path | None,
    hta_py: Path,
    synth: Path | None,
) -> list[dict]:
    """The timing and memory runs of every trace, interleaved per trace: one row each."""
    results = []
    for tr in traces:
        json_bytes = text_mb(tr) * 1e6
        g_cmd = gpuopt_cmd(gpuopt_bin, tr)
        g_runs, h_runs, solo_runs, rev_runs, g_mem, h_mem = [], [], [], [], [], []
        run_hta = not (synth is not None and tr == synth and args.skip_hta_synthetic)
        for _ in range(args.repeat):  # interleaved, so machine load hits both alike
            g_runs.append(measure(g_cmd, args.timeout))
            if args.without_helper:
                solo_runs.append(measure(g_cmd, args.timeout, {"GPUOPT_TRACE_WORKERS": "0"}))
            if rev_bin is not None:
                rev_runs.append(measure(gpuopt_cmd(rev_bin, tr), args.timeout))
            if run_hta:
                h_runs.append(measure(hta_cmd(hta_py, tr), args.timeout))
        rev_mem: list[dict] = []
        for _ in range(args.memory_runs):
            g_mem.append(measure(g_cmd, args.timeout, memory=True))
            if rev_bin is not None:
                rev_mem.append(measure(gpuopt_cmd(rev_bin, tr), args.timeout, memory=True))
            if run_hta:
                h_mem.append(measure(hta_cmd(hta_py, tr), args.timeout, memory=True))

        def med(runs: list[dict], key: str) -> float | None:
            vals = [r[key] for r in runs if r.get(key) is not None and r.get("rc") == 0]
            return statistics.median(vals) if vals else None

        def least(runs: list[dict]) -> float | None:
            vals = [r["wall_s"] for r in runs if r.get("wall_s") is not None and r.get("rc") == 0]
            return min(vals) if vals else None

        def peak(runs: list[dict]) -> float | None:
            vals = [
                r["peak_rss_bytes"]
                for r in runs
                if r.get("peak_rss_bytes") is not None and r.get("rc") == 0
            ]
            return max(vals) if vals else None

        row = {
            "trace": label(tr),
            "json_mb": round(json_bytes / 1e6, 1),
            "gpuopt_s": med(g_runs, "wall_s"),
            "gpuopt_min_s": least(g_runs),
            "hta_min_s": least(h_runs),
            "gpuopt_no_helper_s": med(solo_runs, "wall_s"),
            "gpuopt_rev_s": med(rev_runs, "wall_s"),
            "gpuopt_rss_mb": (peak(g_mem) or 0) / 1e6 or None,
            "gpuopt_rev_rss_mb": (peak(rev_mem) or 0) / 1e6 or None,
            "hta_s": med(h_runs, "wall_s"),
            "hta_rss_mb": (peak(h_mem) or 0) / 1e6 or None,
            "gpuopt_runs": g_runs,
            "hta_runs": h_runs,
            "gpuopt_no_helper_runs": solo_runs,
            "gpuopt_rev_runs": rev_runs,
            "gpuopt_memory_runs": g_mem,
            "hta_memory_runs": h_mem,
            "gpuopt_command": " ".join(["gpuopt", *g_cmd[1:]]),
        }
        row["speedup"] = (
            round(row["hta_s"] / row["gpuopt_s"], 2) if row["hta_s"] and row["gpuopt_s"] else None
        )
        row["speedup_of_mins"] = (
            round(row["hta_min_s"] / row["gpuopt_min_s"], 2)
            if row["hta_min_s"] and row["gpuopt_min_s"]
            else None
        )
        row["rss_ratio"] = (
            round(row["gpuopt_rss_mb"] / row["hta_rss_mb"], 3)
            if row["hta_rss_mb"] and row["gpuopt_rss_mb"]
            else None
        )
        results.append(row)
        print(
            f"{row['trace']}: {row['json_mb']} MB  gpuopt {row['gpuopt_s']}s "
            f"(at {args.compare_rev}: {row['gpuopt_rev_s']}s) / {row['gpuopt_rss_mb']} MB   "
            f"HTA {row['hta_s']}s / {row['hta_rss_mb']} MB   "
            f"speedup {row['speedup']}  rss ratio {row['rss_ratio']}",
            flush=True,
        )
    return results


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeat", type=int, default=3, help="timing runs of each tool per trace")
    ap.add_argument(
        "--memory-runs",
        type=int,
        default=2,
        help="memory runs of each tool per trace (sampled, not timed)",
    )
    ap.add_argument("--synthetic-mb", type=int, default=256)
    ap.add_argument(
        "--skip-hta-synthetic", action="store_true", help="do not run HTA on the synthetic trace"
    )
    ap.add_argument("--no-real", action="store_true")
    ap.add_argument(
        "--min-mb", type=float, default=0, help="only real traces of this much JSON or more"
    )
    ap.add_argument(
        "--one-line",
        action="store_true",
        help="also each real trace written as one line of JSON (benchmarks/.work/one-line/)",
    )
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--out", type=Path, default=WORK / "bench-trace.json")
    ap.add_argument(
        "--without-helper", action="store_true", help="also time gpuopt with GPUOPT_TRACE_WORKERS=0"
    )
    ap.add_argument(
        "--compare-rev",
        metavar="REV",
        help="also time gpuopt as of git revision REV, interleaved (a change's effect)",
    )
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="TEXT",
        help="only traces whose path contains TEXT (repeatable)",
    )
    ap.add_argument(
        "--busy",
        type=int,
        default=0,
        metavar="N",
        help="run N busy-loop processes during the timing and memory runs (a load of N)",
    )
    ap.add_argument(
        "--parity",
        action="store_true",
        help="first print HTA's and gpuopt's temporal shares and idle split per trace, and the "
        "departures apart (--repeat 0: only that)",
    )
    ap.add_argument(
        "--reuse-install",
        action="store_true",
        help="time the user venv as it is (an earlier run installed the checkout there)",
    )
    args = ap.parse_args()
    # a wheel install, as a user has it (see installed.py)
    gpuopt_bin = USER_VENV / "bin" if args.reuse_install else user_venv()
    rev_bin = (
        (reused_revision(args.compare_rev) if args.reuse_install else None)
        or revision_venv(args.compare_rev)
        if args.compare_rev
        else None
    )
    hta_py = ensure_hta()
    traces = [] if args.no_real else [make_small(), *real_traces()]
    traces = [t for t in traces if text_mb(t) >= args.min_mb]
    if args.one_line:
        traces += [make_one_line(t) for t in traces if t.parent != WORK]
    synth = make_synthetic(args.synthetic_mb) if args.synthetic_mb > 0 else None
    if synth:
        traces.append(synth)
    if args.only:
        traces = [t for t in traces if any(s in str(t) for s in args.only)]
    if args.parity:
        extra = [
            t
            for t in [*real_traces(PARITY_ONLY), *[r for r in (RESNET,) if r.exists()]]
            if not args.only or any(o in str(t) for o in args.only)
        ]
        real = [t for t in traces if WORK not in t.parents]  # not the generated ones
        rows = [parity_row(gpuopt_bin, hta_py, t, args.timeout) for t in [*real, *extra]]
        print_parity(rows)
        parity_out = args.out.with_name(args.out.stem + "-parity.json")
        parity_out.parent.mkdir(parents=True, exist_ok=True)
        parity_out.write_text(json.dumps(rows, indent=1))
        if args.repeat == 0:
            return
    with busy_loops(args.busy):
        results = time_traces(args, traces, gpuopt_bin, rev_bin, hta_py, synth)
    versions = subprocess.run(
        [
            str(hta_py),
            "-c",
            "import importlib.metadata as m; "
            "print({p: m.version(p) for p in ('HolisticTraceAnalysis', 'pandas', 'numpy')})",
        ],
        capture_output=True,
        text=True,
    ).stdout.strip()
    machine = {
        "hta_venv": versions,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "mem_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1),
        "load_avg_at_end": os.getloadavg(),
        "busy_loops": args.busy,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "command": " ".join(sys.argv),
                "machine": machine,
                "when": time.strftime("%Y-%m-%d %H:%M:%S"),
                "results": results,
            },
            indent=1,
        )
    )
    print_table(results, args.without_helper, args.compare_rev if rev_bin else None)
    print(f"\nmachine: {machine}\nresults: {args.out}")


if __name__ == "__main__":
    main()
