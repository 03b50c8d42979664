"""A Lightning script in the style of its examples: a `LightningModule` with automatic optimization,
so the optimizer steps through a closure (`optimizer.step(closure)` runs forward and backward inside
it), gradient clipping, a `DataLoader` of tuples, Lightning's progress bar. `--max-steps`."""
import argparse

import lightning as L
import torch
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--max-steps", type=int, default=300)
args = parser.parse_args()


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


g = torch.Generator().manual_seed(0)
x = torch.randn(4096, 32, generator=g)
y = (x[:, :4].argmax(1)).long()
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=64, shuffle=True)
trainer = L.Trainer(max_steps=args.max_steps, accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, gradient_clip_val=1.0, enable_model_summary=False)
trainer.fit(Classifier(), loader)
