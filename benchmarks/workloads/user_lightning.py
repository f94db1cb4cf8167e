"""A user's short Lightning run: an autoencoder, 60 training steps of 2-3 ms (one epoch), a
DataLoader over a TensorDataset, Lightning's defaults (progress bar and logger off, no
checkpoint), one intra-op thread. Few steps: gpuopt's fixed costs and its recording window
weigh on it as they do on a user's quick try.

A callback times each training batch (``on_train_batch_start`` to ``on_train_batch_end``,
the step as Lightning counts it) and prints ``STEP_MEDIAN_MS`` (after 5 warm-up batches) and
``LOOP_START``/``LOOP_END`` (the fit's ``time.time()`` stamps) to stderr.

    python benchmarks/workloads/user_lightning.py [--steps 60]
"""

import argparse
import statistics
import sys
import time

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitAutoEncoder(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(28 * 28, 64), nn.ReLU(), nn.Linear(64, 3))
        self.decoder = nn.Sequential(nn.Linear(3, 64), nn.ReLU(), nn.Linear(64, 28 * 28))

    def training_step(self, batch, batch_idx):  # noqa: ANN001, ANN201
        x, _ = batch
        x = x.view(x.size(0), -1)
        loss = nn.functional.mse_loss(self.decoder(self.encoder(x)), x)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):  # noqa: ANN201
        return torch.optim.Adam(self.parameters(), lr=1e-3)


class StepTimes(L.Callback):
    def __init__(self) -> None:
        self.times: list[float] = []
        self.t0 = 0.0

    def on_train_batch_start(self, *args) -> None:  # noqa: ANN002
        self.t0 = time.perf_counter()

    def on_train_batch_end(self, *args) -> None:  # noqa: ANN002
        self.times.append(time.perf_counter() - self.t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    n = args.steps * 32
    data = TensorDataset(torch.rand(n, 1, 28, 28), torch.randint(0, 10, (n,)))
    timer = StepTimes()
    trainer = L.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=False,
        callbacks=[timer],
    )
    print(f"LOOP_START {time.time():.6f}", file=sys.stderr)
    trainer.fit(LitAutoEncoder(), DataLoader(data, batch_size=32, shuffle=True))
    print(f"LOOP_END {time.time():.6f}", file=sys.stderr)
    print(f"STEP_MEDIAN_MS {statistics.median(timer.times[5:]) * 1e3:.4f}", file=sys.stderr)


if __name__ == "__main__":
    main()
