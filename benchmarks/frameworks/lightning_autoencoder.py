"""A LitAutoEncoder as in Lightning's basic examples, trained offline on random 28x28 images.

Checked with lightning 2.6.6 and torch 2.13.0 (CPU). Its default ``Trainer`` runs the validation
sanity check first, logs every step and shows a progress bar.
"""

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitAutoEncoder(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(28 * 28, 64), nn.ReLU(), nn.Linear(64, 3))
        self.decoder = nn.Sequential(nn.Linear(3, 64), nn.ReLU(), nn.Linear(64, 28 * 28))

    def training_step(self, batch, batch_idx):
        x, _ = batch
        x = x.view(x.size(0), -1)
        x_hat = self.decoder(self.encoder(x))
        loss = nn.functional.mse_loss(x_hat, x)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, _ = batch
        x = x.view(x.size(0), -1)
        x_hat = self.decoder(self.encoder(x))
        self.log("val_loss", nn.functional.mse_loss(x_hat, x))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main() -> None:
    torch.manual_seed(0)
    images = torch.rand(6000, 1, 28, 28)
    labels = torch.randint(0, 10, (6000,))
    train = DataLoader(TensorDataset(images[:5000], labels[:5000]), batch_size=32, shuffle=True)
    val = DataLoader(TensorDataset(images[5000:], labels[5000:]), batch_size=32)
    trainer = L.Trainer(  # trainer
        max_steps=60, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False
    )
    trainer.fit(LitAutoEncoder(), train, val)  # fit


if __name__ == "__main__":
    main()
