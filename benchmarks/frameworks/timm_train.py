"""An image classifier trained the way timm's library is used in a script of one's own (not
timm's train.py): the model from ``timm.create_model``, the data from ``timm.data``'s
``create_dataset`` and ``create_loader`` (timm's training transforms: torchvision's flip and
colour jitter among them), the optimizer from ``timm.optim.create_optimizer_v2``, the schedule
from ``timm.scheduler.create_scheduler_v2``, the loss from ``timm.loss``, and a loop of its own.
Offline: a tiny model built from its config, on ``timm_data.py``'s generated image folder (written
to a temporary folder unless ``--data-dir`` names one).

    python benchmarks/frameworks/timm_train.py [--data-dir DIR] [--epochs 2] [-b 4]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import timm
import timm_data  # beside this file (python puts the script's folder first on the path)
import torch
from timm.data import create_dataset, create_loader
from timm.loss import LabelSmoothingCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import create_scheduler_v2

IMG_SIZE = 32


def loader(root: str, split: str, batch_size: int, training: bool) -> torch.utils.data.DataLoader:
    dataset = create_dataset("", root=root, split=split, is_training=training)
    return create_loader(
        dataset,
        input_size=(3, IMG_SIZE, IMG_SIZE),
        batch_size=batch_size,
        is_training=training,
        use_prefetcher=False,  # the prefetcher would move each batch to the GPU
        num_workers=0,  # transforms in the training process
        persistent_workers=False,
    )


def evaluate(model: torch.nn.Module, batches: torch.utils.data.DataLoader) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, labels in batches:  # eval
            correct += int((model(images).argmax(-1) == labels).sum())  # accuracy
            total += len(labels)
    model.train()
    return correct / max(total, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("-b", "--batch-size", type=int, default=4)
    args = ap.parse_args()
    root = args.data_dir or timm_data.write(Path(tempfile.mkdtemp()) / "data", per_class=12)

    torch.manual_seed(0)
    model = timm.create_model("test_resnet", pretrained=False, num_classes=2)
    train = loader(str(root), "train", args.batch_size, training=True)
    val = loader(str(root), "validation", args.batch_size, training=False)
    optimizer = create_optimizer_v2(model, opt="adamw", lr=1e-3, weight_decay=0.05)
    scheduler, epochs = create_scheduler_v2(
        optimizer, sched="cosine", num_epochs=args.epochs, updates_per_epoch=len(train)
    )
    loss_fn = LabelSmoothingCrossEntropy(smoothing=0.1)

    updates = 0
    for epoch in range(epochs):
        for i, (images, labels) in enumerate(train):  # fetch
            loss = loss_fn(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()  # step
            updates += 1
            scheduler.step_update(num_updates=updates)
            if i % 2 == 0:
                print(f"epoch {epoch} batch {i} loss {loss.item():.4f}")  # log
        scheduler.step(epoch + 1)
        print(f"epoch {epoch} accuracy {evaluate(model, val):.2f}")


if __name__ == "__main__":
    main()
