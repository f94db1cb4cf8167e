"""A segmentation-style CPU training step with the host-side habits that starve a GPU.

- builds an (80, H, W) per-class bit mask with a Python for-loop over classes (the seminar's
  Tip 2: one broadcast comparison does it);
- logs ``loss.item()`` every step and branches on a tensor (``if acc > best``): host syncs that
  would stall a GPU every step;
- copies its batch to the device without pinned memory or ``non_blocking``.

``gpuopt profile examples/segmentation_loops.py`` points at each of those lines.
"""

import argparse

import torch
from torch import nn

NUM_CLASSES = 80


def class_masks(seg: torch.Tensor) -> torch.Tensor:
    """(B, H, W) class ids → (B, C, H, W) masks, the slow way."""
    masks = torch.zeros(seg.shape[0], NUM_CLASSES, *seg.shape[1:])
    for c in range(NUM_CLASSES):
        masks[:, c] = seg == c
    return masks


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--size", type=int, default=32)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, NUM_CLASSES, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    best = torch.tensor(0.0)
    for step in range(args.steps):
        img = torch.randn(4, 3, args.size, args.size)
        seg = torch.randint(0, NUM_CLASSES, (4, args.size, args.size))
        img, seg = img.to(device), seg.to(device)
        target = class_masks(seg).to(device)
        opt.zero_grad()
        out = model(img)
        loss = nn.functional.binary_cross_entropy_with_logits(out, target)
        loss.backward()
        opt.step()
        acc = (out.argmax(1) == seg).float().mean()
        if acc > best:
            best = acc
        print(f"step {step}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
