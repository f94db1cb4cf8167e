"""The CPU time a training step takes in a plain loop and under Lightning's Trainer (its default
settings, and with the progress bar off), on the autoencoder of lightning_autoencoder.py.

Per step: the main thread's CPU time (``time.thread_time``, which a busy machine's waits for a
core leave out) of a run of ``LONG`` steps minus one of ``SHORT`` steps, over the difference:
start-up, the sanity check and the first steps cancel out. Run with ``OMP_NUM_THREADS=1``.

    python benchmarks/frameworks/lightning_overhead.py
"""

from __future__ import annotations

import time
import warnings

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

SHORT, LONG = 100, 400


def data() -> DataLoader:
    torch.manual_seed(0)
    images = torch.rand(20000, 1, 28, 28)
    return DataLoader(TensorDataset(images, torch.zeros(20000)), batch_size=32, shuffle=True)


def plain(steps: int) -> float:
    enc = nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 3))
    dec = nn.Sequential(nn.Linear(3, 64), nn.ReLU(), nn.Linear(64, 784))
    opt = torch.optim.Adam([*enc.parameters(), *dec.parameters()], lr=1e-3)
    loader = data()
    t0 = time.thread_time()
    done = 0
    while done < steps:
        for x, _ in loader:
            x = x.view(x.size(0), -1)
            loss = nn.functional.mse_loss(dec(enc(x)), x)
            opt.zero_grad()
            loss.backward()
            opt.step()
            done += 1
            if done == steps:
                break
    return time.thread_time() - t0


def lightning(steps: int, **settings: object) -> float:
    import lightning as L
    from lightning_autoencoder import LitAutoEncoder

    trainer = L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        **settings,  # type: ignore[arg-type]
    )
    t0 = time.thread_time()
    trainer.fit(LitAutoEncoder(), data())
    return time.thread_time() - t0


def per_step(run, **settings: object) -> float:  # type: ignore[no-untyped-def]
    return (run(LONG, **settings) - run(SHORT, **settings)) / (LONG - SHORT)


def main() -> None:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    rows = [
        ("plain loop", per_step(plain)),
        ("Lightning, default Trainer", per_step(lightning)),
        ("Lightning, enable_progress_bar=False", per_step(lightning, enable_progress_bar=False)),
    ]
    for name, s in rows:
        print(f"{name:40s} {s * 1e3:6.2f} ms CPU a step")
    base = rows[0][1]
    print(f"Lightning's share of its default step: {1 - base / rows[1][1]:.0%}")


if __name__ == "__main__":
    main()
