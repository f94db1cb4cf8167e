"""The ``fused-ops`` fix on minGPT's ``NewGELU``, timed outside gpuopt.

    python benchmarks/bench_fused_gelu.py [--pairs 5] [--iters 130] [--skip 10]
                                          [--interleave N] [--snapshots DIR] [--json FILE]

minGPT (benchmarks/corpus/sources.toml: taken from a local snapshot, never kept here) is copied
twice into ``benchmarks/corpus/.cache/fused_gelu/``: as it is (``hand``), and with
``mingpt/model.py`` rewritten by gpuopt's own codemod (``fused``: ``NewGELU``'s 8-op expression,
line 27, becomes ``F.gelu(x, approximate="tanh")``, the only change). Each pair runs the same
training in two fresh processes, one per copy, the order alternating (hand first in even pairs):
chargpt's model, data and trainer as the corpus runs it (gpt-nano, 16x32 tokens, in-process
loading, one intra-op thread, the corpus's generated ``input.txt``), its callback replaced by one
that notes the time at each iteration's end (no sampling), ``--iters`` iterations. A pair's ratio
is the median step of ``hand`` over the median step of ``fused``, the first ``--skip`` steps left
out. Prints each pair and the median ratio; JSON with every step time in --json. With
``--interleave N`` it also runs N steps in one process, ``NewGELU.forward`` swapped between the
two expressions in ABBA blocks of steps (the finer comparison: the same weights, data and
machine moment on both sides), and prints the median of the blocks' ratios.

Run it under the quiet lock when its numbers are written down (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import corpus_data
from corpus_sources import load_sources, materialize

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CACHE = HERE / "corpus" / ".cache"
WORK = CACHE / "fused_gelu"
SNAPSHOTS = Path(os.environ.get("GPUOPT_CORPUS_SNAPSHOTS", "/work/.mirror"))
GELU_LINE = 27  # mingpt/model.py: NewGELU.forward's return
CONFIG = [
    "--model.model_type=gpt-nano",
    "--data.block_size=32",
    "--trainer.batch_size=16",
    "--trainer.num_workers=0",
]

# chargpt's __main__ without its sampling callback: the same config, data, model and trainer
DRIVER = """
import json, runpy, sys, time
import torch
ns = runpy.run_path("projects/chargpt/chargpt.py", run_name="chargpt")
from mingpt.model import GPT
from mingpt.trainer import Trainer
from mingpt.utils import set_seed
config = ns["get_config"]()
config.merge_from_args(sys.argv[2:])
set_seed(config.system.seed)
data = ns["CharDataset"](config.data, open("input.txt").read())
config.model.vocab_size = data.get_vocab_size()
config.model.block_size = data.get_block_size()
trainer = Trainer(config.trainer, GPT(config.model), data)
ends = [time.perf_counter()]
trainer.set_callback("on_batch_end", lambda t: ends.append(time.perf_counter()))
trainer.run()
print(json.dumps([b - a for a, b in zip(ends, ends[1:])]))
"""


# the same training in one process, NewGELU's forward swapped between the two expressions
# step by step in ABBA blocks (hand, fused, fused, hand): the same weights, data and machine
# state on both sides, a slow drift of the machine cancelled within each block of four
INTERLEAVED = """
import json, math, runpy, sys, time
import torch
import torch.nn.functional as F
ns = runpy.run_path("projects/chargpt/chargpt.py", run_name="chargpt")
from mingpt import model as M
from mingpt.trainer import Trainer
from mingpt.utils import set_seed
config = ns["get_config"]()
config.merge_from_args(sys.argv[2:])
set_seed(config.system.seed)
data = ns["CharDataset"](config.data, open("input.txt").read())
config.model.vocab_size = data.get_vocab_size()
config.model.block_size = data.get_block_size()
hand = M.NewGELU.forward
def fused(self, x):
    return F.gelu(x, approximate="tanh")
trainer = Trainer(config.trainer, M.GPT(config.model), data)
ends, sides = [time.perf_counter()], []
def at_end(t):
    ends.append(time.perf_counter())
    side = "hand" if len(ends) % 4 in (0, 1) else "fused"  # the side of the next step
    M.NewGELU.forward = hand if side == "hand" else fused
    sides.append(side)
M.NewGELU.forward = hand
sides.append("hand")
trainer.set_callback("on_batch_end", at_end)
trainer.run()
print(json.dumps([[s, b - a] for s, a, b in zip(sides, ends, ends[1:])]))
"""


def run_interleaved(copy: Path, iters: int, skip: int) -> dict[str, object]:
    """ABBA blocks of steps in one process (:data:`INTERLEAVED`): each block's hand time over
    its fused time; their median, and the medians of each side's steps."""
    env = dict(os.environ, PYTHONPATH=str(copy), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-c", INTERLEAVED, "x", *CONFIG, f"--trainer.max_iters={iters}"],
        cwd=copy, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    steps = json.loads(proc.stdout.strip().splitlines()[-1])
    start = skip + (-skip) % 4  # whole ABBA blocks
    blocks = []
    for i in range(start, len(steps) - 3, 4):
        block = steps[i : i + 4]
        side = {k: sum(t for s, t in block if s == k) for k in ("hand", "fused")}
        blocks.append(side["hand"] / side["fused"])
    each = {k: statistics.median(t for s, t in steps[start:] if s == k) for k in ("hand", "fused")}
    return {"blocks": blocks, "ratio": statistics.median(blocks), "median_s": each, "steps": steps}


def make_copies(snapshots: Path) -> dict[str, Path]:
    from gpuopt.fixes.fused_ops import rewrite_hand_written_ops

    src = materialize(load_sources(HERE / "corpus" / "sources.toml")["mingpt"], snapshots,
                      CACHE / "sources" / "mingpt")  # fmt: skip
    text = (src / "mingpt" / "model.py").read_text()
    rewrite = rewrite_hand_written_ops(text, [GELU_LINE], name="model.py")
    before, after = text.splitlines(), rewrite.source.splitlines()
    changed = [n for n, (a, b) in enumerate(zip(before, after, strict=True), 1) if a != b]
    if changed != [GELU_LINE] or 'F.gelu(x, approximate="tanh")' not in after[GELU_LINE - 1]:
        raise SystemExit(f"the codemod changed lines {changed}: {after[GELU_LINE - 1]!r}")
    copies = {}
    for name, model in (("hand", text), ("fused", rewrite.source)):
        dest = WORK / name
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(src, dest)
        (dest / "mingpt" / "model.py").write_text(model)
        (dest / "input.txt").write_text(corpus_data.play_text(100_000), encoding="utf-8")
        copies[name] = dest
    return copies


def run_once(copy: Path, iters: int) -> list[float]:
    env = dict(os.environ, PYTHONPATH=str(copy), OMP_NUM_THREADS="1")
    args = [*CONFIG, f"--trainer.max_iters={iters}"]
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, "x", *args],
        cwd=copy, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return list(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--iters", type=int, default=130)
    ap.add_argument("--skip", type=int, default=10)
    ap.add_argument("--snapshots", type=Path, default=SNAPSHOTS)
    ap.add_argument("--json", type=Path, default=WORK / "results.json")
    ap.add_argument(
        "--interleave",
        type=int,
        default=0,
        metavar="N",
        help="also N steps in one process, the two GELUs swapped in ABBA blocks",
    )
    args = ap.parse_args()
    copies = make_copies(args.snapshots)
    inter = None
    if args.interleave:
        inter = run_interleaved(copies["hand"], args.interleave, args.skip)
        blocks = inter["blocks"]
        assert isinstance(blocks, list)
        print(
            f"interleaved, {len(blocks)} ABBA blocks of steps in one process: median block "
            f"{inter['ratio']:.3f}x; steps hand {inter['median_s']['hand'] * 1e3:.2f} ms, "  # type: ignore[index]
            f"fused {inter['median_s']['fused'] * 1e3:.2f} ms",  # type: ignore[index]
            flush=True,
        )
    pairs = []
    for i in range(args.pairs):
        order = ("hand", "fused") if i % 2 == 0 else ("fused", "hand")
        times = {name: run_once(copies[name], args.iters) for name in order}
        med = {k: statistics.median(v[args.skip :]) for k, v in times.items()}
        ratio = med["hand"] / med["fused"]
        pairs.append({"order": order, "median_s": med, "ratio": ratio, "steps_s": times})
        print(
            f"pair {i + 1} ({order[0]} first): hand {med['hand'] * 1e3:.2f} ms, "
            f"fused {med['fused'] * 1e3:.2f} ms, {ratio:.3f}x",
            flush=True,
        )
    ratios = [p["ratio"] for p in pairs]
    if ratios:
        print(f"median of {len(ratios)} pair ratios: {statistics.median(ratios):.3f}x "
              f"(range {min(ratios):.3f}-{max(ratios):.3f}); load {os.getloadavg()}")  # fmt: skip
    args.json.parent.mkdir(parents=True, exist_ok=True)
    doc = {"load": os.getloadavg(), "pairs": pairs, "interleaved": inter}
    args.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
