"""A tiny image folder for timm's train.py, offline: ``train/`` and ``validation/``, two classes
of random 64x64 RGB PNGs (seeded), written under the folder given (24 a class for training, a
quarter of that for validation, unless a number is given).

    python benchmarks/frameworks/timm_data.py /tmp/timm-data [PER_CLASS]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from PIL import Image


def write(root: Path, per_class: int = 24, size: int = 64) -> Path:
    rng = np.random.default_rng(0)
    for split, n in (("train", per_class), ("validation", per_class // 4)):
        for cls in ("a", "b"):
            folder = root / split / cls
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")
    return root


if __name__ == "__main__":
    print(write(Path(sys.argv[1]), *(int(n) for n in sys.argv[2:3])))
