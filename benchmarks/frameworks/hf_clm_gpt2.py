"""A tiny random GPT-2 trained with the Hugging Face Trainer, as transformers' run_clm.py does it:
the model built from a config (no download), random token ids grouped into blocks, the default
data collator, offline. Checked with transformers 5.23.0, accelerate 1.15.0, torch 2.13.0."""

import os
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainingArguments,
    default_data_collator,
)

BLOCK = 32
STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 30


class Blocks(torch.utils.data.Dataset):
    """run_clm.py's group_texts: token ids cut into BLOCK-long blocks, labels = input_ids."""

    def __init__(self, n, vocab, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, vocab, (n, BLOCK), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        ids = self.ids[i]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


def main():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=512, n_positions=BLOCK, n_embd=64, n_layer=2, n_head=2)
    model = GPT2LMHeadModel(config)
    out = tempfile.mkdtemp(prefix="hf_clm_")
    args = TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=8,
        max_steps=STEPS,
        learning_rate=5e-4,
        logging_steps=10,
        save_strategy="no",
        report_to="none",
        dataloader_num_workers=0,
        seed=0,
        disable_tqdm=True,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=Blocks(STEPS * 8, config.vocab_size),
        data_collator=default_data_collator,
    )
    trainer.train()


if __name__ == "__main__":
    main()
