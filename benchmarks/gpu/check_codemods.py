"""GPU check of the codemods' CUDA forms (issue 26), run by `make gpu-check` (one script a topic).

    python3 benchmarks/gpu/check_codemods.py [--budget SECONDS]

Case: per-class masks, 80 classes on one 512x512 map into float masks (the seminar's case,
measured 15.1x on an H200 with the assignment form). Three forms of the same work, each written
by the vectorize codemod itself from the loop's text (CPU form: ``cuda=False``; CUDA form:
``cuda=True``): the loop, ``masks[:80] = seg == c.view(...)`` (a boolean temporary, then a
copy), and ``torch.eq(..., out=masks[:80])`` (one kernel, cast on store). For each: equal to the
loop bit for bit, the CUDA kernels one run launches (torch.profiler), and the median time of
alternated runs (CUDA events), with the ratio to the loop. Prints Markdown lines as it goes;
"skipped: no CUDA device" without one. Exit 0 unless it crashed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LOOP = "for c in range(80):\n    masks[c] = seg == c\n"


def say(line: str) -> None:
    print(line, flush=True)


def forms() -> dict[str, Any]:
    from gpuopt.optimize.codemods.vectorize import rewrite_vectorize

    text = "import torch\n" + LOOP
    out = {"loop": compile(text, "<loop>", "exec")}
    for label, cuda in (("assignment", False), ("eq out=", True)):
        rewritten = rewrite_vectorize(text, [2], cuda=cuda)
        if not rewritten.changes:
            raise SystemExit(f"the codemod did not rewrite the loop: {rewritten.skipped}")
        out[label] = compile(rewritten.source, f"<{label}>", "exec")
    return out


def fresh(torch: Any) -> dict[str, Any]:
    g = torch.Generator(device="cuda").manual_seed(0)
    seg = torch.randint(0, 80, (512, 512), device="cuda", generator=g)
    return {"torch": torch, "seg": seg, "masks": torch.zeros(80, 512, 512, device="cuda")}


def kernels(torch: Any, code: Any) -> int:
    from torch.profiler import ProfilerActivity, profile

    ns = fresh(torch)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        exec(code, ns)
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type.name == "CUDA")


def timed(torch: Any, code: Any) -> float:
    ns = fresh(torch)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    exec(code, ns)
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=40.0)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        say("skipped: no CUDA device (torch is not installed here)")
        return 0
    if not torch.cuda.is_available():
        say("skipped: no CUDA device")
        return 0
    t0 = time.perf_counter()
    say(f"### codemods (issue 26) — {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    say("")
    codes = forms()
    results: dict[str, Any] = {}
    for label, code in codes.items():
        ns = fresh(torch)
        exec(code, ns)
        results[label] = ns["masks"]
    for label in ("assignment", "eq out="):
        same = bool(torch.equal(results["loop"], results[label]))
        say(f"- class masks 80x512x512, `{label}`: equal to the loop bit for bit: {same}")
    counts = {label: kernels(torch, code) for label, code in codes.items()}
    say("- CUDA kernels one run launches: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    times: dict[str, list[float]] = {label: [] for label in codes}
    for code in codes.values():  # warm-up
        timed(torch, code)
    order = list(codes)
    rounds = 0
    while time.perf_counter() - t0 < args.budget * 0.6 and rounds < 50:
        for label in order if rounds % 2 == 0 else order[::-1]:
            times[label].append(timed(torch, codes[label]))
        rounds += 1
    loop = statistics.median(times["loop"])
    for label, ts in times.items():
        med = statistics.median(ts)
        spread = f"{min(ts):.3f}-{max(ts):.3f}"
        ratio = f", {loop / med:.1f}x the loop" if label != "loop" else ""
        say(f"- `{label}`: median {med:.3f} ms over {len(ts)} alternated runs ({spread}){ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
