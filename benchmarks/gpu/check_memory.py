"""GPU check of the memory model: the fake-tensor prediction against the CUDA allocator.

    python3 benchmarks/gpu/check_memory.py [--budget SECONDS]

For two models (a convolutional net with batch norm on 3x96x96 images, a Transformer language
model with a 16k vocabulary) at two batch sizes each, and an LSTM language model (cuDNN's reserve
space: estimated by the replay, checked here): the real training step on the GPU (Adam,
the step run once to make the optimizer's state, then measured: torch.cuda.max_memory_allocated
over the second step), and the prediction gpuopt makes of it — the first step recorded, replayed
under fake tensors on the GPU's device (what ``gpuopt profile --memory-for`` does on a GPU
machine) and on fake CPU tensors modelled as CUDA (what it does on a machine without one).
The bar is within 10%. Then ``gpuopt profile --memory-for h100`` of a small CUDA script,
measured and predicted side by side in its document. Prints Markdown lines as it goes; without a
CUDA device it prints one line and exits 0.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

LIMIT = 0.10


def say(line: str) -> None:
    print(line, flush=True)


def conv_net() -> Any:
    from torch import nn

    def block(i: int, o: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())

    return nn.Sequential(
        block(3, 64), block(64, 64), nn.MaxPool2d(2), block(64, 128), block(128, 128),
        nn.MaxPool2d(2), block(128, 256), block(256, 256), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(256, 100),
    )  # fmt: skip


def lm_module() -> Any:
    from torch import nn

    class TinyLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            layer = nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True, dropout=0.1)
            self.emb = nn.Embedding(16_000, 512)
            self.body = nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)
            self.head = nn.Linear(512, 16_000)

        def forward(self, x: Any) -> Any:
            return self.head(self.body(self.emb(x)))

    return TinyLM()


def lstm_module() -> Any:
    """pytorch/examples' word_language_model at a GPU's size: its reserve space is cuDNN's, which
    the replay estimates (gpuopt/memory/kernels.py): this row checks the estimate."""
    from torch import nn

    class LstmLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(10_000, 512)
            self.rnn = nn.LSTM(512, 512, num_layers=2)
            self.head = nn.Linear(512, 10_000)

        def forward(self, x: Any) -> Any:
            return self.head(self.rnn(self.emb(x))[0])

    return LstmLM()


def _phase_peaks(tracker_cls: Any) -> tuple[dict[str, int], Any]:
    """Wrap StepTracker._update_peak to keep the replay's peak total by phase (a diagnostic:
    where in the step a prediction differs from the measurement)."""
    peaks: dict[str, int] = {}
    orig = tracker_cls._update_peak

    def update(self: Any) -> None:
        key = {"temporaries": "backward", "optimizer_state": "step"}.get(self.phase, "forward")
        if key == "backward" and "forward end" not in peaks:
            peaks["forward end"] = self.total  # the first count of the backward
        peaks[key] = max(peaks.get(key, 0), self.total)
        orig(self)

    tracker_cls._update_peak = update
    return peaks, orig


def _real_step(model: Any, opt: Any, x: Any, y: Any, loss_of: Any) -> dict[str, int]:
    """One measured step: the peak of its forward (with the loss), backward and optimizer step."""
    import torch

    out: dict[str, int] = {}
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    logits = model(x)
    loss = loss_of(logits, y)
    torch.cuda.synchronize()
    out["forward"] = torch.cuda.max_memory_allocated()
    out["forward end"] = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss.backward()
    torch.cuda.synchronize()
    out["backward"] = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    opt.step()
    torch.cuda.synchronize()
    out["step"] = torch.cuda.max_memory_allocated()
    del logits, loss
    return out


def case(name: str, make: Any, batch: int, data: Any, loss_of: Any) -> tuple[str, str]:
    """One model at one batch size: measured, predicted (fake CUDA), predicted (fake CPU); and
    a diagnostic row: the peaks of the forward, backward and step, measured and replayed, and
    the bytes the cuBLAS workspaces held."""
    import torch

    from gpuopt.memory.capture import StepRecorder
    from gpuopt.memory.replay import ReplayOptions, replay
    from gpuopt.memory.tracker import StepTracker

    torch.manual_seed(0)
    model = make().cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    rec = StepRecorder()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    peak = 0
    rec.start()
    try:
        for i in range(2):
            x, y = data(batch)
            opt.zero_grad()
            if i == 1:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
            out = model(x)  # held by a variable through the backward, as scripts do
            loss = loss_of(out, y)
            loss.backward()
            opt.step()
            del out, loss
            if i == 0:
                rec.step_ended()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    finally:
        rec.stop()
    x, y = data(batch)
    opt.zero_grad()
    phases = _real_step(model, opt, x, y, loss_of)
    at = torch.cuda.memory_allocated()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    blas = at - torch.cuda.memory_allocated() if clear is not None else -(2**20)
    inferred = rec.step.batch_size
    shown = f"{batch}" + (f" (gpuopt: {inferred})" if inferred != batch else "")
    out = [f"| {name} | {shown} | {peak / 2**20:.1f}"]
    diag = [f"| {name} | {batch} | " + ", ".join(f"{k} {v / 2**20:.0f}" for k, v in phases.items())]
    for device in ("auto", "cpu"):
        t = time.perf_counter()
        replay_peaks, orig = _phase_peaks(StepTracker)
        try:
            r = replay(rec.step, ReplayOptions(batch, device=device))
            err = (r.peak_bytes - peak) / peak
            ok = "yes" if abs(err) <= LIMIT else "**no**"
            took = time.perf_counter() - t
            out.append(f"{r.peak_bytes / 2**20:.1f} ({err * 100:+.1f}%, {ok}, {took:.2f} s)")
            diag.append(", ".join(f"{k} {v / 2**20:.0f}" for k, v in replay_peaks.items()))
        except Exception as exc:
            out.append(f"failed: {type(exc).__name__}: {str(exc)[:120]}")
            diag.append("–")
        finally:
            StepTracker._update_peak = orig
    out.append(f"{before / 2**20:.1f}")
    diag.append(f"{blas / 2**20:.1f}")
    del model, opt, rec
    gc.collect()  # the recorder's closures hold the model in a cycle: not the next case's
    torch.cuda.empty_cache()
    return " | ".join(out) + " |", " | ".join(diag) + " |"


def cudnn_reserve(budget_s: float) -> list[dict[str, Any]]:
    """cuDNN's LSTM reserve space, as the real kernel returns it (``aten._cudnn_rnn``'s fourth
    output), over a grid of shapes: the data a formula for gpuopt's estimate is fitted to."""
    import itertools

    import torch
    from torch import nn
    from torch.utils._python_dispatch import TorchDispatchMode

    got: list[int] = []

    class Reserve(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten._cudnn_rnn.default:
                got.append(int(out[3].numel() * out[3].element_size()))
            return out

    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    grid = itertools.product(
        (1, 7, 35), (1, 20, 80), (256, 512), (200, 512), (1, 2), (False, True),
        (torch.float32, torch.float16),
    )  # fmt: skip
    for steps, batch, inp, hid, layers, bi, dtype in grid:
        if time.perf_counter() - t0 > budget_s:
            break
        if dtype == torch.float16 and (layers, bi) != (1, False):
            continue
        lstm = nn.LSTM(inp, hid, num_layers=layers, bidirectional=bi).cuda().to(dtype)
        x = torch.randn(steps, batch, inp, device="cuda", dtype=dtype, requires_grad=True)
        got.clear()
        with Reserve():
            lstm(x)
        rows.append(
            {"steps": steps, "batch": batch, "input": inp, "hidden": hid, "layers": layers,
             "bidirectional": bi, "dtype": str(dtype).split(".")[-1], "reserve": list(got)}
        )  # fmt: skip
    return rows


def profile_run(tmp: Path) -> str:
    script = tmp / "train.py"
    script.write_text(
        "import torch\nfrom torch import nn\n"
        "m = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).cuda()\n"
        "opt = torch.optim.AdamW(m.parameters())\n"
        "for _ in range(12):\n"
        "    x = torch.randn(256, 1024, device='cuda')\n"
        "    opt.zero_grad()\n"
        "    m(x).square().mean().backward()\n"
        "    opt.step()\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "gpuopt", "profile", "--quiet", "-o", "run", "--memory-for",
         "h100", str(script)],
        cwd=tmp, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if r.returncode != 0:
        return f"- gpuopt profile --memory-for h100: FAILED ({r.stderr.strip()[-300:]})"
    m = json.loads((tmp / "run" / "profile.json").read_text())["memory"]
    me, p = m.get("measured") or {}, m.get("predicted") or {}
    return (
        f"- gpuopt profile --memory-for h100 (a 2-layer MLP, batch 256, AdamW): measured peak "
        f"allocated {me.get('peak_allocated_bytes', 0) / 2**20:.1f} MiB, reserved "
        f"{me.get('peak_reserved_bytes', 0) / 2**20:.1f} MiB, split {me.get('by_category')}; "
        f"predicted {(p.get('peak_bytes') or 0) / 2**20:.1f} MiB at batch {p.get('batch_size')}, "
        f"largest batch on an H100 {p.get('max_batch_size')} (est.), prediction "
        f"{p.get('cost_s')} s"
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=40.0)
    ap.add_argument("--reserve-out", type=Path, help="write cuDNN's measured LSTM reserve here")
    ns = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        say("skipped: no CUDA device")
        return 0
    t0 = time.perf_counter()
    gpu = torch.cuda.get_device_name()
    say(f"### Memory: predicted against max_memory_allocated ({gpu}, torch {torch.__version__})")
    say("")
    say(
        "| model | batch | measured peak MiB | fake CUDA MiB (error, within 10%, time) "
        "| fake CPU as CUDA MiB (error, within 10%, time) | allocated before the step MiB |"
    )
    say("|---|---|---|---|---|---|")
    import torch.nn.functional as F

    def images(b: int) -> tuple[Any, Any]:
        return torch.randn(b, 3, 96, 96, device="cuda"), torch.randint(0, 100, (b,), device="cuda")

    def tokens(b: int) -> tuple[Any, Any]:
        x = torch.randint(0, 16_000, (b, 256), device="cuda")
        return x, torch.randint(0, 16_000, (b, 256), device="cuda")

    def lm_loss(out: Any, y: Any) -> Any:
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

    def steps(b: int) -> tuple[Any, Any]:  # time-major, 35 steps
        x = torch.randint(0, 10_000, (35, b), device="cuda")
        return x, torch.randint(0, 10_000, (35, b), device="cuda")

    cases = [
        ("conv net (6 conv+BN, 96x96)", conv_net, 32, images, F.cross_entropy),
        ("conv net (6 conv+BN, 96x96)", conv_net, 128, images, F.cross_entropy),
        ("Transformer LM (6x512, seq 256, vocab 16k)", lm_module, 4, tokens, lm_loss),
        ("Transformer LM (6x512, seq 256, vocab 16k)", lm_module, 16, tokens, lm_loss),
        (
            "LSTM LM (2x512, 35 steps, vocab 10k; cuDNN reserve estimated)",
            lstm_module,
            20,
            steps,
            lm_loss,
        ),
        (
            "LSTM LM (2x512, 35 steps, vocab 10k; cuDNN reserve estimated)",
            lstm_module,
            80,
            steps,
            lm_loss,
        ),
    ]
    diags: list[str] = []
    for name, make, batch, data, loss in cases:
        if time.perf_counter() - t0 > ns.budget * 0.6:
            say(f"| {name} | {batch} | not run: the budget ({ns.budget:g} s) is spent | | | |")
            continue
        try:
            row, diag = case(name, make, batch, data, loss)
            say(row)
            diags.append(diag)
        except Exception as exc:
            say(f"| {name} | {batch} | FAILED: {type(exc).__name__}: {str(exc)[:160]} | | | |")
    say("")
    say("Where: each phase's peak MiB (forward with the loss, what is allocated at its end,")
    say("backward, optimizer step), measured on a third step and replayed (the replay's without")
    say("its cuBLAS workspaces); the cuBLAS workspaces' MiB (freed by")
    say("`torch._C._cuda_clearCublasWorkspaces()` after it).")
    say("")
    say("| model | batch | measured | fake CUDA | fake CPU as CUDA | cuBLAS workspaces MiB |")
    say("|---|---|---|---|---|---|")
    for d in diags:
        say(d)
    say("")
    if ns.reserve_out is not None and time.perf_counter() - t0 < ns.budget * 0.7:
        rows = cudnn_reserve(ns.budget * 0.15)
        ns.reserve_out.write_text(json.dumps(rows))
        say(f"- cuDNN LSTM reserve space measured at {len(rows)} shapes -> {ns.reserve_out.name}")
        for r in rows[:: max(1, len(rows) // 6)]:
            say(f"  - {r}")
    if time.perf_counter() - t0 < ns.budget * 0.6:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                say(profile_run(Path(tmp)))
            except Exception as exc:
                say(f"- gpuopt profile --memory-for h100: FAILED ({type(exc).__name__}: {exc})")
    say(f"- check_memory.py took {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
