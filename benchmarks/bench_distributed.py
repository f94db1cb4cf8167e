"""Distributed runs on CPU with gloo: is a planted straggler found and named in every
run, how close is the measured wait to the planted one, is a crashing rank named, do two
simulated nodes merge, and what does gpuopt cost a DDP job (and does it train the same)?

Every run is ``tests/data/scripts/ddp_straggler.py`` (a small DDP model; one rank sleeps
``--extra-ms`` per step, in its loop or in its Dataset, and writes its own account of the sleeps,
step times and a digest of the trained parameters):

* **straggler**: ``gpuopt profile --nproc-per-node N`` for N in 2, 4 and the plant in the loop
  and in the data; per run: the rank the ``straggler-rank`` finding names, its top part, and
  each other rank's measured wait per step over the planted sleep (the script's own);
* **crash**: rank 1 raises at step 4; the exit code, the job's status, the rank the error names;
* **two nodes**: two launchers on this machine, ``--nnodes 2`` with a c10d rendezvous, one
  shared run directory; the ranks merged and the straggler named;
* **cost**: the same balanced job (no plant) under plain torchrun and under ``gpuopt profile``,
  interleaved pair by pair: the script's own median step time on rank 0 and its parameter
  digest (gpuopt's timed DDP hook must train bit for bit the same; with 3 ranks the scaling by
  1/3 rounds, and ``gradient_as_bucket_view`` with gradients kept between steps takes DDP's
  other scaling path).

    python benchmarks/bench_distributed.py [--repeats 5] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "data" / "scripts" / "ddp_straggler.py"
PY = sys.executable


def gpuopt(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "gpuopt", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def plain_torchrun(args: list[str], env: dict[str, str]) -> None:
    """The job without gpuopt; tried again once when torchrun itself fails to start (its
    standalone rendezvous picks a free port that another process on this shared machine may
    take first)."""
    cmd = [PY, "-m", "torch.distributed.run", "--standalone", *args]
    for attempt in (1, 2):
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
        if r.returncode == 0:
            return
        print(f"  plain torchrun failed (attempt {attempt}): {r.stderr.strip()[-300:]}")
    raise SystemExit("plain torchrun failed twice")


def truth(prefix: Path, world: int) -> list[dict[str, Any]]:
    return [json.loads(Path(f"{prefix}.rank{k}.json").read_text()) for k in range(world)]


def straggler_run(world: int, where: str, tmp: Path) -> dict[str, Any]:
    out, tru = tmp / "job", tmp / "truth"
    t0 = time.perf_counter()
    r = gpuopt("profile", "--quiet", "--force", "--nproc-per-node", str(world), "-o", str(out),
               str(SCRIPT), "--steps", "20", "--where", where, "--truth", str(tru))  # fmt: skip
    wall = time.perf_counter() - t0
    doc = json.loads((out / "profile.json").read_text())
    planted = truth(tru, world)[1]["extra_s_per_step"]
    found = [f for f in doc["findings"] if f["id"] == "straggler-rank"]
    waits = [e["collective_wait_s_per_step"] for e in doc["ranks"] if e["rank"] != 1]
    return {
        "exit": r.returncode,
        "named": found[0]["evidence"]["rank"] if found else None,
        "top_part": found[0]["evidence"]["top_part"] if found else None,
        "ratios": [w / planted for w in waits],
        "planted_ms": planted * 1e3,
        "wall_s": wall,
    }


def crash_run(tmp: Path) -> dict[str, Any]:
    out = tmp / "crash"
    r = gpuopt("profile", "--quiet", "--force", "--nproc-per-node", "2", "-o", str(out),
               str(SCRIPT), "--crash-rank", "1", "--crash-step", "4")  # fmt: skip
    doc = json.loads((out / "profile.json").read_text())
    msg = (doc.get("error") or {}).get("message", "")
    return {
        "exit": r.returncode,
        "status": doc["status"],
        "names_rank_1": msg.startswith("rank 1 failed: planted crash"),
        "rank0_written": (out / "rank-0" / "profile.json").exists(),
    }


def two_nodes_run(tmp: Path) -> dict[str, Any]:
    out = tmp / "nodes"
    if out.exists():
        subprocess.run(["rm", "-rf", str(out)], check=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [PY, "-m", "gpuopt", "profile", "--quiet", "--nnodes", "2", "--nproc-per-node", "1",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "b",
           "-o", str(out), str(SCRIPT), "--steps", "14"]  # fmt: skip
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(2)
    ]
    codes = [p.wait(timeout=600) for p in procs]
    doc = json.loads((out / "profile.json").read_text())
    found = [f for f in doc["findings"] if f["id"] == "straggler-rank"]
    return {
        "exits": codes,
        "ranks": [e["rank"] for e in doc["ranks"]],
        "named": found[0]["evidence"]["rank"] if found else None,
    }


def cost_pair(world: int, tmp: Path, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """Plain torchrun, then gpuopt, on the same balanced job: rank 0's median step (the
    script's own clock) and the parameter digest of every rank."""
    base = [f"--nproc-per-node={world}", str(SCRIPT), "--steps", "40", "--extra-ms", "0", *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    plain = tmp / "plain"
    plain_torchrun([*base, "--truth", str(plain)], env)
    prof = tmp / "prof"
    gpuopt("profile", "--quiet", "--force", "-o", str(tmp / "costjob"), "--nproc-per-node",
           str(world), *base[1:], "--truth", str(prof))  # fmt: skip
    a, b = truth(plain, world), truth(prof, world)
    return {
        "plain_ms": statistics.median(a[0]["step_s"][2:]) * 1e3,
        "gpuopt_ms": statistics.median(b[0]["step_s"][2:]) * 1e3,
        "same_params": [x["param_sha256"] for x in a] == [y["param_sha256"] for y in b],
    }


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f} (1 min), {five:.2f} (5 min)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args()
    lines = [f"load average at the start: {load()}", ""]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        lines += straggler_section(args.repeats, tmp)
        lines += other_section(args.repeats, tmp)
        lines += cost_section(args.repeats, tmp)
    lines += ["", f"load average at the end: {load()}"]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        args.markdown.write_text(text)


def straggler_section(repeats: int, tmp: Path) -> list[str]:
    rows = ["| ranks | plant in | runs | rank 1 named | top part | wait / planted: median "
            "(min–max over the other ranks and runs) | planted ms/step | s per run |",
            "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for world in (2, 4):
        for where in ("loop", "data"):
            runs = [straggler_run(world, where, tmp) for _ in range(repeats)]
            for r in runs:
                print(f"  {world} ranks, {where}: named {r['named']}, {r['top_part']}, "
                      f"ratios {[round(x, 3) for x in r['ratios']]}")  # fmt: skip
            ratios = [x for r in runs for x in r["ratios"]]
            named = sum(r["named"] == 1 and r["exit"] == 0 for r in runs)
            parts = sorted({str(r["top_part"]) for r in runs})
            rows.append(
                f"| {world} | {where} | {len(runs)} | **{named}/{len(runs)}** | "
                f"{', '.join(parts)} | {statistics.median(ratios):.3f} ({min(ratios):.3f}–"
                f"{max(ratios):.3f}) | {statistics.median(r['planted_ms'] for r in runs):.1f} | "
                f"{statistics.median(r['wall_s'] for r in runs):.1f} |"
            )
    return rows


def other_section(repeats: int, tmp: Path) -> list[str]:
    crashes = [crash_run(tmp) for _ in range(repeats)]
    nodes = [two_nodes_run(tmp) for _ in range(repeats)]
    ok_crash = sum(
        c["exit"] != 0 and c["status"] == "error" and c["names_rank_1"] and c["rank0_written"]
        for c in crashes
    )
    ok_nodes = sum(n["exits"] == [0, 0] and n["ranks"] == [0, 1] and n["named"] == 1 for n in nodes)
    return [
        "",
        "| check | runs | as expected |",
        "|---|---|---|",
        f"| rank 1 crashes at step 4: exit code non-zero, status `error`, the error names rank 1, "
        f"rank 0's profile written | {len(crashes)} | **{ok_crash}/{len(crashes)}** |",
        f"| `--nnodes 2`, two launchers, c10d rendezvous, one shared directory: ranks 0 and 1 "
        f"merged, rank 1 named the straggler | {len(nodes)} | **{ok_nodes}/{len(nodes)}** |",
    ]


def cost_section(repeats: int, tmp: Path) -> list[str]:
    rows = ["", "| ranks | DDP | pairs | median step, plain torchrun | median step, gpuopt "
            "profile | ratio (median of pairs) | same parameters after training |",
            "|---|---|---|---|---|---|---|"]  # fmt: skip
    configs: tuple[tuple[int, tuple[str, ...], str], ...] = (
        (2, (), "default"),
        (3, (), "default"),
        (3, ("--bucket-view", "--keep-grads"), "gradient_as_bucket_view, grads kept"),
    )
    for world, extra, label in configs:
        pairs = [cost_pair(world, tmp, extra) for _ in range(repeats)]
        ratio = statistics.median(p["gpuopt_ms"] / p["plain_ms"] for p in pairs)
        same = sum(p["same_params"] for p in pairs)
        rows.append(
            f"| {world} | {label} | {len(pairs)} | "
            f"{statistics.median(p['plain_ms'] for p in pairs):.2f} ms"
            f" | {statistics.median(p['gpuopt_ms'] for p in pairs):.2f} ms | {ratio:.3f} | "
            f"**{same}/{len(pairs)}** |"
        )
    return rows


if __name__ == "__main__":
    main()
