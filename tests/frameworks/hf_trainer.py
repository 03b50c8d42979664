"""A Hugging Face `Trainer` script in the style of the Transformers docs: a tiny BERT from a random
config (no download), a synthetic classification set, a collator that returns a `BatchEncoding` (a
Mapping, not a dict) as the library's collators do, `model(**inputs)` inside the Trainer, accelerate's
wrapped optimizer. `--max-steps`, `--out` for the Trainer's folder."""
import argparse

import torch
from transformers import BatchEncoding, BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--max-steps", type=int, default=300)
parser.add_argument("--out", default="hf_out")
args = parser.parse_args()


class Synthetic(torch.utils.data.Dataset):
    """Token ids whose label is whether token 7 appears: something to learn."""

    def __init__(self, n=2048, length=32, vocab=128):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(8, vocab, (n, length), generator=g)
        self.ids[: n // 2, 3] = 7
        self.labels = (self.ids == 7).any(1).long()

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def collate(items):
    ids = torch.stack([x["input_ids"] for x in items])
    return BatchEncoding({"input_ids": ids, "attention_mask": torch.ones_like(ids),
                          "labels": torch.stack([x["labels"] for x in items])})


config = BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=128, max_position_embeddings=64, num_labels=2)
model = BertForSequenceClassification(config)
training = TrainingArguments(output_dir=args.out, max_steps=args.max_steps, per_device_train_batch_size=32,
                             learning_rate=1e-3, logging_steps=50, save_strategy="no", report_to=[],
                             dataloader_num_workers=0, disable_tqdm=False, seed=0)
Trainer(model=model, args=training, train_dataset=Synthetic(), data_collator=collate).train()
