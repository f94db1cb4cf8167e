"""GPU check of the compile view (docs/compile.md), for `make gpu-check`.

`gpuopt profile` of a small CUDA training script that compiles its model with three planted graph
breaks (a print, an .item(), a data-dependent if) and a sequence length that changes once:

* the breaks and the recompile at their lines, compile time, graphs run and ops left eager
  between them (the compile probe's CPU-profiled step comes after the GPU profiler window);
* the GPU profiler window's trace of compiled code: its idle causes (a compiled region is a
  container: ``compiled_region`` only where nothing inside explains the idle; ``sync`` no more
  than the sync calls' own span) and no HIGH ``sync-in-step`` from a region.

Backend ``aot_eager`` first (seconds to compile); ``inductor`` next when the budget leaves time.
Prints Markdown lines as it goes; "skipped: no CUDA device" without one. Run from the source tree:

    python3 benchmarks/gpu/check_compile.py [--budget 40]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SCRIPT = """
import sys
import torch

BACKEND = sys.argv[1]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(256, 256)
        self.head = torch.nn.Linear(256, 1)

    def forward(self, x):
        h = torch.relu(self.proj(x))
        print("hidden", tuple(h.shape))  # BREAK-PRINT
        stat = h.abs().mean().item()  # BREAK-ITEM
        if h.sum() > 0:  # BREAK-IF
            h = h * 2
        self.last_stat = stat
        return self.head(h).mean()


model = Net().cuda()
model.compile(backend=BACKEND)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(16):
    seq = 64 if step < 12 else 96
    x = torch.randn(32, seq, 256, device="cuda")
    loss = model(x)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def say(line: str) -> None:
    print(line, flush=True)


def _line(text: str, marker: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if f"# {marker}" in ln)


def _line_of(site: object) -> str | None:
    """The line number of a ``file:line`` site; None for a site gpuopt could not find."""
    if not isinstance(site, str) or ":" not in site:
        return None
    return site.rsplit(":", 1)[-1]


def _site_text(site: object, function: object) -> str:
    if isinstance(site, str) and site:
        return site
    where = f"in `{function}`, " if function else ""
    return f"site unknown ({where}no frame of the script on Dynamo's stack)"


def _report(doc: dict, backend: str, wall: float, planted: dict[str, int]) -> None:
    """The run's compile view as Markdown lines; every key read may be missing or null (a check
    says what it got, it never crashes on it)."""
    c = doc.get("compile") or {}
    say(f"- backend `{backend}`: run {wall:.1f} s, compile {c.get('compile_s')} s "
        f"(share {c.get('compile_share')}), import {c.get('import_s')} s, frames "
        f"{c.get('frames')}, graphs {c.get('graphs')}")  # fmt: skip
    found: set[str] = set()
    for g in c.get("graph_breaks") or []:
        line = _line_of(g.get("site"))
        if line is not None:
            found.add(line)
            where = f"line {line}"
        else:
            where = _site_text(None, g.get("function"))
        say(f"  - break at {where}: {g.get('kind')} ({g.get('count')}x) {g.get('reason')!r}")
    missing = {m: n for m, n in planted.items() if str(n) not in found}
    say(f"  - planted breaks found at their lines: {len(planted) - len(missing)} of "
        f"{len(planted)}" + (f"; missing {missing}" if missing else ""))  # fmt: skip
    for r in c.get("recompiles") or []:
        say(f"  - recompile at {_site_text(r.get('site'), r.get('function'))}: "
            f"`{r.get('guard')}` x{r.get('count')} steps {r.get('steps')}")  # fmt: skip
    names = [f.get("name") for f in c.get("functions") or []]
    say(f"  - compiled functions: {names}; note: {c.get('note')}")
    say(f"  - per step (step {c.get('window_step')}): regions {c.get('regions_per_step')}, "
        f"graphs run {c.get('graph_calls_per_step')}, eager ops between graphs "
        f"{c.get('eager_ops_per_step')}, ops outside {c.get('outside_ops_per_step')}")  # fmt: skip
    ranks = (doc.get("trace") or {}).get("ranks") or []
    for r in ranks:
        ic = r.get("idle_causes") or {}
        causes = {
            k: round(v / 1e3, 2)
            for k, v in (ic.get("by_cause") or {}).items()
            if isinstance(v, (int, float)) and v
        }
        idle = ic.get("idle_us")
        idle_ms = round(idle / 1e3, 2) if isinstance(idle, (int, float)) else None
        say(f"  - profiler window idle {idle_ms} ms: {causes} (ms)")
        sc = r.get("sync_calls") or {}
        say(f"  - sync calls: {sc.get('count')}, their own span {sc.get('time_us')} µs")
    findings = doc.get("findings") or []
    high = [f.get("id") for f in findings if f.get("severity") == "high"]
    say(f"  - findings: {[f.get('id') for f in findings]}; high: {high}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--budget", type=float, default=40.0)
    a = ap.parse_args()
    t0 = time.monotonic()
    import torch

    if not torch.cuda.is_available():
        say("skipped: no CUDA device")
        return 0
    say(f"### compile view on {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "compiled_train.py"
        script.write_text(SCRIPT)
        lines = {m: _line(SCRIPT, m) for m in ("BREAK-PRINT", "BREAK-ITEM", "BREAK-IF")}
        say(f"- planted breaks at lines {lines}")
        for backend in ("aot_eager", "inductor"):
            left = a.budget - (time.monotonic() - t0)
            if left < 15:
                say(f"- backend `{backend}`: skipped, {left:.0f} s of budget left")
                continue
            out = Path(tmp) / backend
            s0 = time.monotonic()
            try:
                r = subprocess.run(
                    [sys.executable, "-m", "gpuopt", "profile", "--quiet", "-o", str(out),
                     str(script), backend],
                    cwd=ROOT, capture_output=True, text=True, timeout=left,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                say(f"- backend `{backend}`: cut at the budget ({left:.0f} s)")
                continue
            if r.returncode != 0 or not (out / "profile.json").exists():
                say(f"- backend `{backend}`: failed (exit {r.returncode}): {r.stderr[-300:]!r}")
                continue
            wall = time.monotonic() - s0
            try:
                doc = json.loads((out / "profile.json").read_text())
            except (OSError, ValueError) as exc:
                say(f"- backend `{backend}`: profile.json not readable: {exc}")
                continue
            _report(doc, backend, wall, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
