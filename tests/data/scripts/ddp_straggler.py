"""A planted straggler under DDP (gloo, CPU): one rank does EXTRA_MS more work per step.

    torchrun --nproc-per-node 2 ddp_straggler.py [--steps N] [--slow-rank R] [--extra-ms MS]
        [--where loop|data] [--crash-rank R --crash-step S] [--truth FILE]
        [--accumulate K [--no-sync]] [--layers L] [--bucket-cap-mb MB]

The slow rank sleeps (no CPU taken from the other ranks on a small machine): in the training
loop (``--where loop``) or inside its Dataset's ``__getitem__`` (``--where data``, which a
profiler sees as DataLoader wait). Every rank times its own sleeps and the whole steps; with
``--truth FILE`` each rank writes ``FILE.rank<R>.json``: the planted extra time per measured step
(the sleeps the script really slept), its step times and a digest of the trained parameters, so
a test compares gpuopt's numbers with the script's own (and a run without gpuopt with one with it). ``--crash-rank R --crash-step S`` raises on rank R at step S.
``--accumulate K``: K micro-batches per optimizer step, each all-reducing its gradients unless
``--no-sync`` (then all but the last run under ``model.no_sync()``); ``--layers`` and
``--bucket-cap-mb`` shape DDP's buckets; ``--bucket-view`` (``gradient_as_bucket_view=True``) with
``--keep-grads`` (``zero_grad(set_to_none=False)``) takes DDP's other scaling path.
"""
import argparse
import hashlib
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=24)
ap.add_argument("--slow-rank", type=int, default=1)
ap.add_argument("--extra-ms", type=float, default=20.0)
ap.add_argument("--where", choices=("loop", "data"), default="loop")
ap.add_argument("--crash-rank", type=int, default=None)
ap.add_argument("--crash-step", type=int, default=5)
ap.add_argument("--truth", default=None)
ap.add_argument("--warmup", type=int, default=2)
ap.add_argument("--accumulate", type=int, default=1)
ap.add_argument("--no-sync", action="store_true")
ap.add_argument("--layers", type=int, default=1)
ap.add_argument("--bucket-cap-mb", type=float, default=25.0)
ap.add_argument("--bucket-view", action="store_true")  # gradient_as_bucket_view=True
ap.add_argument("--keep-grads", action="store_true")  # zero_grad(set_to_none=False)
args = ap.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
slow = rank == args.slow_rank
slept: list[float] = []


def plant() -> None:
    t0 = time.perf_counter()
    time.sleep(args.extra_ms / 1e3)
    slept.append(time.perf_counter() - t0)


class Batches(Dataset):
    def __len__(self):
        return args.steps * 16

    def __getitem__(self, i):
        if slow and args.where == "data" and i % 16 == 0:
            plant()  # the first sample of each batch of 16
        g = torch.Generator().manual_seed(i)
        return torch.randn(64, generator=g), torch.randn(4, generator=g)


torch.manual_seed(0)
hidden = [m for _ in range(args.layers - 1) for m in (torch.nn.Linear(128, 128), torch.nn.ReLU())]
net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), *hidden, torch.nn.Linear(128, 4))
model = DDP(net, bucket_cap_mb=args.bucket_cap_mb, gradient_as_bucket_view=args.bucket_view)  # ddp
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Batches(), batch_size=16 // args.accumulate)
step_times = []
t_last = time.perf_counter()
for step, (x, y) in enumerate(loader):  # step: a micro-batch
    if args.crash_rank == rank and step == args.crash_step:
        raise RuntimeError(f"planted crash on rank {rank} at step {step}")
    if slow and args.where == "loop" and step % args.accumulate == 0:
        plant()
    if step % args.accumulate == 0:
        opt.zero_grad(set_to_none=not args.keep_grads)
    last = step % args.accumulate == args.accumulate - 1
    if args.no_sync and not last:
        with model.no_sync():
            torch.nn.functional.mse_loss(model(x), y).backward()
    else:
        torch.nn.functional.mse_loss(model(x), y).backward()
    if not last:
        continue
    opt.step()
    now = time.perf_counter()
    step_times.append(now - t_last)
    t_last = now
if args.truth:
    measured = slept[args.warmup :]
    truth = {
        "rank": rank,
        "world_size": world,
        "steps": len(step_times),
        "slow": slow,
        "extra_s_per_step": sum(measured) / len(measured) if measured else 0.0,
        "step_s_mean": sum(step_times[args.warmup :]) / max(len(step_times) - args.warmup, 1),
        "step_s": step_times,
        # what training computed: the parameters after the last step, bit for bit
        "param_sha256": hashlib.sha256(
            b"".join(p.detach().numpy().tobytes() for p in model.parameters())
        ).hexdigest(),
    }
    with open(f"{args.truth}.rank{rank}.json", "w") as fh:
        json.dump(truth, fh)
print(f"rank {rank} of {world} done, LOCAL_RANK={os.environ['LOCAL_RANK']}")
dist.destroy_process_group()
