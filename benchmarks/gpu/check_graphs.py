"""GPU check of whole-step CUDA graphs and of AoT on training and inference.

    python3 benchmarks/gpu/check_graphs.py [--budget SECONDS]

Prints Markdown lines as it goes (a cut run keeps what it printed); "skipped: no CUDA device"
and exit 0 without a GPU. Each check runs only if the budget left allows it:

1. ``graphed_step`` on a launch-bound training step (cuda_train.py's model, batches already on
   the device): eager against the whole step captured, alternated blocks of steps, median
   ms/step, losses compared; SGD, and Adam (``capturable=True``).
2. ``forward="aot"`` (the aot fix on training) on a branchy model: eager, captured, captured with
   Nimble's forward.
3. A step with ``.item()`` inside: refused, runs eagerly, no crash.
4. ``gpuopt.aot.schedule`` on the zoo (small): which plan it hands back and the two graphs'
   measured times; the no-graph launch against eager.
5. ``gpuopt optimize --fix aot --quick --steps 40`` on cuda_train.py (the 7.5x slowdown of the
   H200 run): gain and verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
T0 = time.perf_counter()


def say(line: str) -> None:
    print(line, flush=True)


def left(budget: float) -> float:
    return budget - (time.perf_counter() - T0)


def _cuda_train_model() -> Any:
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(8),
        nn.Flatten(),
        nn.Linear(32 * 64, 10),
    ).cuda()


def _branchy() -> Any:
    import torch
    from torch import nn

    class Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.heads = nn.ModuleList(
                nn.Sequential(nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 64)) for _ in range(8)
            )
            self.out = nn.Linear(512, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(torch.cat([h(x) for h in self.heads], 1))

    return Branchy().cuda()


def _train(make_model: Callable[[], Any], opt_name: str, shape: tuple[int, ...], mode: str,
           steps: int, seed: int = 0) -> tuple[list[float], list[float], Any]:  # fmt: skip
    """(ms per step over blocks of 10, losses, status) of one training run."""
    import torch
    from torch import nn

    from gpuopt.graphs import CapturedStep

    torch.manual_seed(seed)
    model = make_model()
    opt = (
        torch.optim.SGD(model.parameters(), lr=0.01)
        if opt_name == "sgd"
        else torch.optim.Adam(model.parameters(), lr=1e-3)
    )
    g = torch.Generator(device="cuda").manual_seed(seed)
    data = [
        (torch.randn(*shape, device="cuda", generator=g),
         torch.randint(0, 10, (shape[0],), device="cuda", generator=g))
        for _ in range(8)
    ]  # fmt: skip
    loss_fn = nn.CrossEntropyLoss()

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    run: Any = step
    if mode != "eager":
        run = CapturedStep(step, [opt], [model], forward="aot" if mode == "aot" else "as written")
    losses: list[torch.Tensor] = []
    times: list[float] = []
    for k in range(steps):
        if k % 10 == 0:
            torch.cuda.synchronize()
            t = time.perf_counter()
        x, y = data[k % len(data)]
        losses.append(run(x, y).detach())
        if k % 10 == 9:
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t) * 100.0)  # ms per step over 10 steps
    return times, [float(v) for v in losses], getattr(run, "status", None)


def check_whole_step(budget: float) -> None:
    for opt_name in ("sgd", "adam"):
        if left(budget) < 8:
            say(f"- whole step ({opt_name}): skipped, budget")
            return
        shape = (64, 3, 64, 64)
        eager, e_loss, _ = _train(_cuda_train_model, opt_name, shape, "eager", 60)
        graph, g_loss, st = _train(_cuda_train_model, opt_name, shape, "graph", 60)
        eager2, _, _ = _train(_cuda_train_model, opt_name, shape, "eager", 60)
        e = statistics.median(eager[2:] + eager2[2:])
        gm = statistics.median(graph[2:])
        diff = max(abs(a - b) / max(abs(a), 1e-12) for a, b in zip(e_loss, g_loss, strict=True))
        say(
            f"- whole step, cuda_train model, {opt_name}: eager {e:.3f} ms/step, captured "
            f"{gm:.3f} ms/step (**{e / gm:.2f}x**); state {st.state}, captured at call "
            f"{st.first_capture_call}, {st.replays} replays; losses max rel diff {diff:.2e}"
            + (f"; refusals {st.refusals}" if st.refusals else "")
        )


def check_aot_training(budget: float) -> None:
    if left(budget) < 10:
        say("- aot on training: skipped, budget")
        return
    shape = (32, 256)
    out = {}
    for mode in ("eager", "graph", "aot"):
        times, losses, st = _train(_branchy, "adam", shape, mode, 50)
        out[mode] = (statistics.median(times[2:]), losses, st)
    e = out["eager"][0]
    note = next((n for n in out["aot"][2].notes if n.startswith("forward='aot'")), "")
    say(
        f"- aot on training (8-branch MLP, Adam): eager {e:.3f}, captured {out['graph'][0]:.3f} "
        f"({e / out['graph'][0]:.2f}x), captured with Nimble's forward {out['aot'][0]:.3f} ms/step "
        f"({e / out['aot'][0]:.2f}x); {note}"
    )


def check_refusal(budget: float) -> None:
    import torch
    from torch import nn

    from gpuopt.graphs import CapturedStep

    model = nn.Linear(8, 2).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x: torch.Tensor) -> float:
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        return loss.item()

    run = CapturedStep(step, [opt], [model])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(6):
            run(torch.randn(4, 8, device="cuda"))
    st = run.status
    say(f"- a step with .item(): state {st.state}, {st.eager_calls} eager calls, {st.refusals[:1]}")


def check_schedule(budget: float) -> None:
    import torch

    from gpuopt.aot import schedule, zoo

    for name in ("resnet_stage", "transformer_block", "inception_v3"):
        if left(budget) < 10:
            say(f"- schedule {name}: skipped, budget")
            continue
        model, inputs = zoo.ZOO[name]("small")
        model = model.cuda().eval()
        inputs = tuple(x.cuda() for x in inputs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sm = schedule(model, inputs)
            nograph = schedule(model, inputs, cuda_graph=False, streams="multi")
        ch = sm.plan.choice

        def per_call(fn: Callable[[], Any], n: int = 30) -> float:
            fn()
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
            return (time.perf_counter() - t) / n * 1e3

        with torch.no_grad():
            eager = per_call(lambda m=model, x=inputs: m(*x))
            ng = per_call(lambda m=nograph, x=inputs: m(*x))
        say(
            f"- schedule {name} (small): runs {ch['chosen']} by {ch['by']} "
            f"(multi {1e3 * (ch['multi_stream_s'] or 0):.3f} ms, "
            f"one {1e3 * (ch['one_stream_s'] or 0):.3f} ms); "
            f"no-graph launch {ng:.3f} ms vs eager {eager:.3f} ms a call"
        )


def check_optimize_aot(budget: float) -> None:
    if left(budget) < 60:
        say("- optimize --fix aot --quick --steps 40 cuda_train.py: skipped, budget (needs ~60 s)")
        return
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run(
            [sys.executable, "-m", "gpuopt", "optimize", "--quiet", "-o", "o", "--quick",
             "--steps", "40", "--fix", "aot", str(ROOT / "benchmarks/gpu/cuda_train.py")],
            cwd=d, capture_output=True, text=True, timeout=max(left(budget), 1),
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])),
        )  # fmt: skip
        if r.returncode != 0:
            say(f"- optimize --fix aot: FAILED {r.stderr.strip().splitlines()[-1:]}")
            return
        doc = json.loads((Path(d) / "o" / "optimize.json").read_text())
        rows = "; ".join(
            f"{f['id']}: applied={f['applied']} verified={f['verified']} gain={f['gain']}"
            for f in doc["fixes"]
        )
        say(f"- optimize --fix aot --quick --steps 40 cuda_train.py: {doc['speedup']}x; {rows}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=40.0)
    budget = parser.parse_args().budget
    import torch

    if not torch.cuda.is_available():
        say("skipped: no CUDA device")
        return 0
    say(
        f"### Whole-step CUDA graphs and AoT ({torch.cuda.get_device_name(0)}, "
        f"torch {torch.__version__})"
    )
    for check in (check_whole_step, check_aot_training, check_refusal, check_schedule,
                  check_optimize_aot):  # fmt: skip
        try:
            check(budget)
        except Exception as exc:  # one failing check must not hide the others
            say(f"- {check.__name__}: FAILED {type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
