"""GPU check of the codemods' CUDA forms, run by `make gpu-check` (one script a topic).

    python3 benchmarks/gpu/check_codemods.py [--budget SECONDS]

Cases:

* the sync fix on a small CUDA training loop (an MLP, 300 steps): the reads used only in the
  logging branch (an ``accuracy()`` returning ``.item()``, a ``.topk(3).indices.tolist()``) and a
  ``history.append(loss.item())`` list, as written and as the ``syncs`` codemod rewrites them:
  the printed output identical, the reads counted, the time of the loop (alternated runs,
  medians);
* per-class masks, 80 classes on one 512x512 map into float masks (the seminar's case,
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
TRAIN = """
import torch
import torch.nn.functional as F


def accuracy(logits, y):
    return (logits.argmax(1) == y).float().mean().item()


torch.manual_seed(0)
dev = "cuda"
model = torch.nn.Sequential(
    torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
history = []
for step in range(300):
    x = torch.randn(128, 64, device=dev)
    y = (x[:, :10].argmax(1) + step) % 10
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    acc = accuracy(logits, y)
    top = logits[0].topk(3).indices.tolist()
    opt.zero_grad()
    loss.backward()
    opt.step()
    history.append(loss.item())
    if step % 20 == 0:
        print(f"step {step} loss {history[-1]:.4f} acc {acc:.3f} top {top}")
print("mean", sum(history) / len(history))
"""


def say(line: str) -> None:
    print(line, flush=True)


def forms() -> dict[str, Any]:
    from gpuopt.fixes.loops.vectorize import rewrite_vectorize

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


def sync_forms() -> tuple[str, str, list[str]]:
    from gpuopt.fixes.syncs.codemod import rewrite_syncs

    lines = [
        i
        for i, t in enumerate(TRAIN.splitlines(), 1)
        if ".mean().item()" in t or ".tolist()" in t or "history.append" in t
    ]
    rewritten = rewrite_syncs(TRAIN, lines, name="train.py")
    return TRAIN, rewritten.source, rewritten.notes


def run_train(torch: Any, text: str) -> tuple[str, int, float]:
    """What the loop prints, its reads, its seconds (synchronized at the end)."""
    import contextlib
    import io

    reads = 0
    originals = {n: getattr(torch.Tensor, n) for n in ("item", "tolist")}

    def counted(name: str) -> Any:
        def read(t: Any) -> Any:
            nonlocal reads
            reads += 1
            return originals[name](t)

        return read

    buf = io.StringIO()
    for n in originals:
        setattr(torch.Tensor, n, counted(n))
    try:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(buf):
            exec(compile(text, "<train>", "exec"), {"__name__": "__main__"})
        torch.cuda.synchronize()
        took = time.perf_counter() - t0
    finally:
        for n, f in originals.items():
            setattr(torch.Tensor, n, f)
    return buf.getvalue(), reads, took


def check_syncs(torch: Any, budget: float) -> None:
    old, new, notes = sync_forms()
    say(f"- syncs on a CUDA loop of 300 steps: {len(notes)} rewrites ({'; '.join(notes)[:200]})")
    first_old, first_new = run_train(torch, old), run_train(torch, new)
    same = first_old[0] == first_new[0]
    say(
        f"- syncs: printed output identical byte for byte: {same}; reads {first_old[1]} -> "
        f"{first_new[1]}"
    )
    t0 = time.perf_counter()
    times: dict[str, list[float]] = {"as written": [], "rewritten": []}
    rounds = 0
    while time.perf_counter() - t0 < budget and rounds < 20:
        order = [("as written", old), ("rewritten", new)]
        for label, text in order if rounds % 2 == 0 else order[::-1]:
            times[label].append(run_train(torch, text)[2])
        rounds += 1
    a, b = statistics.median(times["as written"]), statistics.median(times["rewritten"])
    say(
        f"- syncs: the loop as written {a * 1e3:.1f} ms, rewritten {b * 1e3:.1f} ms, "
        f"{a / b:.2f}x (medians of {rounds} alternated runs)"
    )


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
    say(f"### codemods — {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    say("")
    try:
        check_syncs(torch, args.budget * 0.3)
    except Exception as exc:  # one failing case must not hide the other
        say(f"- syncs: FAILED {type(exc).__name__}: {exc}")
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
    while time.perf_counter() - t0 < args.budget * 0.8 and rounds < 50:
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
