"""A tiny random BERT fine-tuned for sequence classification with the Hugging Face Trainer, with
an evaluation every 10 steps: the model built from a config (no download), random token ids and
labels, offline. Checked with transformers 5.23.0, accelerate 1.15.0, torch 2.13.0."""

import os
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

SEQ = 24
STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 30


class Pairs(torch.utils.data.Dataset):
    def __init__(self, n, vocab, seed):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, vocab, (n, SEQ), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        ids = self.ids[i]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": self.labels[i]}


def main():
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
    args = TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="hf_bert_"),
        per_device_train_batch_size=8,
        per_device_eval_batch_size=16,
        max_steps=STEPS,
        eval_strategy="steps",
        eval_steps=10,
        logging_steps=10,
        save_strategy="no",
        report_to="none",
        seed=0,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=Pairs(STEPS * 8, config.vocab_size, 0),
        eval_dataset=Pairs(32, config.vocab_size, 1),
    )
    trainer.train()


if __name__ == "__main__":
    main()
