"""A segmentation-style CUDA training step with an 80-class mask built by a Python loop (the
shape of the H200's test script: ../shared/gpu-h200/README.md). `gpuopt optimize --fix vectorize`
rewrites the loop into one broadcast comparison; benchmarks/gpu/check_optimize.py compares the
gain optimize claims with the same diff timed by this script's own clock.

It reads its loss every step (`losses.append(loss.item())`), so its host clock covers the GPU's
work, and prints its median step time (the loader's wait included, 10 warm-up steps left out)
and the sum of its losses. ``--device cpu --size 32`` rehearses it on a CPU
(``check_optimize.py --rehearse``).
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

C = 80


def class_masks(seg):
    masks = torch.zeros(seg.shape[0], C, *seg.shape[1:], device=seg.device)
    for c in range(C):
        masks[:, c] = seg == c
    return masks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--size", type=int, default=128, help="the images' side")
    args = ap.parse_args()
    dev, s = args.device, args.size
    torch.manual_seed(0)
    n = 16 * args.steps
    data = TensorDataset(torch.randn(n, 3, s, s), torch.randint(0, C, (n, s, s)))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, C, 1)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses, times = [], []
    t = time.perf_counter()
    for x, seg in loader:  # a step: from the last one's end, the loader's wait included
        x = x.to(dev)
        seg = seg.to(dev)
        target = class_masks(seg)
        opt.zero_grad()
        loss = nn.functional.binary_cross_entropy_with_logits(model(x), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        now = time.perf_counter()
        times.append(now - t)
        t = now
    kept = sorted(times[10:])
    print(f"STEP_MS {kept[len(kept) // 2] * 1e3:.3f} LOSS_SUM {sum(losses):.6f}")


if __name__ == "__main__":
    main()
