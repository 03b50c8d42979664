"""A fastai script in the style of its tutorials: a `Learner` over fastai's own `DataLoader` (built on
torch's DataLoader iterators, not a torch DataLoader) and fastai's own `Adam` (not a torch.optim
optimizer), trained with `fit`. `--epochs`."""
import argparse

import torch
from fastai.data.core import DataLoaders
from fastai.data.load import DataLoader
from fastai.learner import Learner
from fastai.optimizer import Adam
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=4)
args = parser.parse_args()

torch.manual_seed(0)
X = torch.randn(4096, 32)
y = (X[:, 0] + X[:, 1] > 0).long()
train = [(X[i], y[i]) for i in range(3584)]
valid = [(X[i], y[i]) for i in range(3584, 4096)]
dls = DataLoaders(DataLoader(train, bs=32, shuffle=True, drop_last=True), DataLoader(valid, bs=128))
model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 2))
learn = Learner(dls, model, loss_func=nn.CrossEntropyLoss(), opt_func=Adam, lr=1e-3)
learn.fit(args.epochs)
print("done")
