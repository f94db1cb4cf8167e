"""accelerate's nlp_example.py loop on a tiny random BERT: Accelerator(), prepare() of the model,
optimizer, DataLoaders and scheduler, accelerator.backward, an evaluation after each epoch with
gather_for_metrics; the model built from a config, random data, offline. Checked with
accelerate 1.15.0, transformers 5.23.0, torch 2.13.0."""

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset
from transformers import BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup

SEQ = 24
EPOCHS = int(sys.argv[1]) if len(sys.argv) > 1 else 2


def loaders(vocab, batch_size):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (160, SEQ), generator=g)
    labels = torch.randint(0, 2, (160,), generator=g)
    train = TensorDataset(ids[:128], labels[:128])
    evals = TensorDataset(ids[128:], labels[128:])
    return (
        DataLoader(train, shuffle=True, batch_size=batch_size),
        DataLoader(evals, shuffle=False, batch_size=32),
    )


def main():
    accelerator = Accelerator(mixed_precision="no")
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=512,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=SEQ,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)
    train_dl, eval_dl = loaders(config.vocab_size, 8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4)
    scheduler = get_linear_schedule_with_warmup(optimizer, 4, len(train_dl) * EPOCHS)
    model, optimizer, train_dl, eval_dl, scheduler = accelerator.prepare(
        model, optimizer, train_dl, eval_dl, scheduler
    )
    for epoch in range(EPOCHS):
        model.train()
        for ids, labels in train_dl:
            outputs = model(input_ids=ids, labels=labels)
            accelerator.backward(outputs.loss)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        model.eval()
        correct = 0
        for ids, labels in eval_dl:
            with torch.no_grad():
                logits = model(input_ids=ids).logits
            preds, refs = accelerator.gather_for_metrics((logits.argmax(dim=-1), labels))
            correct += (preds == refs).sum()
        accelerator.print(f"epoch {epoch}: accuracy {correct.item() / 32:.3f}")


if __name__ == "__main__":
    main()
