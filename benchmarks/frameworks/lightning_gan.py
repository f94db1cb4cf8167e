"""A small GAN in Lightning's manual-optimization style (its docs' "Manual optimization" GAN):
two optimizers stepped by hand in one ``training_step``, trained offline on random 28x28 images.

Checked with lightning 2.6.6 and torch 2.13.0 (CPU). With ``automatic_optimization = False``
Lightning counts each ``optimizer.step()`` in ``trainer.global_step``: ``max_steps=40`` is 20
training batches, each one step of the generator and one of the discriminator. The losses are
logged each step to the progress bar (``self.log_dict(..., on_step=True, prog_bar=True)``).
"""

import lightning as L
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

LATENT = 16


class GAN(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.generator = nn.Sequential(
            nn.Linear(LATENT, 128), nn.LeakyReLU(0.2), nn.Linear(128, 28 * 28), nn.Tanh()
        )
        self.discriminator = nn.Sequential(
            nn.Linear(28 * 28, 128), nn.LeakyReLU(0.2), nn.Linear(128, 1)
        )

    def training_step(self, batch, batch_idx):
        imgs, _ = batch
        imgs = imgs.view(imgs.size(0), -1)
        g_opt, d_opt = self.optimizers()
        z = torch.randn(imgs.size(0), LATENT, device=self.device)
        fake = self.generator(z)
        ones = torch.ones(imgs.size(0), 1, device=self.device)
        zeros = torch.zeros(imgs.size(0), 1, device=self.device)

        g_loss = F.binary_cross_entropy_with_logits(self.discriminator(fake), ones)
        g_opt.zero_grad()
        self.manual_backward(g_loss)
        g_opt.step()

        real = F.binary_cross_entropy_with_logits(self.discriminator(imgs), ones)
        forged = F.binary_cross_entropy_with_logits(self.discriminator(fake.detach()), zeros)
        d_loss = (real + forged) / 2
        d_opt.zero_grad()
        self.manual_backward(d_loss)
        d_opt.step()
        self.log_dict({"g_loss": g_loss, "d_loss": d_loss}, on_step=True, prog_bar=True)

    def configure_optimizers(self):
        g = torch.optim.Adam(self.generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
        d = torch.optim.Adam(self.discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
        return [g, d]


def main() -> None:
    torch.manual_seed(0)
    images = torch.rand(2000, 1, 28, 28) * 2 - 1
    labels = torch.zeros(2000, dtype=torch.long)
    train = DataLoader(TensorDataset(images, labels), batch_size=64, shuffle=True)
    trainer = L.Trainer(  # trainer
        max_steps=40, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False
    )
    trainer.fit(GAN(), train)  # fit


if __name__ == "__main__":
    main()
