"""A skorch script in the style of its docs: a torch module wrapped in `NeuralNetClassifier` and
fitted on NumPy arrays as a scikit-learn estimator (skorch builds the torch DataLoader and the
torch.optim optimizer). `--epochs`."""
import argparse

import numpy as np
import torch
from skorch import NeuralNetClassifier

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=4)
args = parser.parse_args()

rng = np.random.default_rng(0)
X = rng.standard_normal((4096, 32)).astype("float32")
y = (X[:, 0] + X[:, 1] > 0).astype("int64")


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 2))

    def forward(self, X):
        return self.net(X)


net = NeuralNetClassifier(MLP, criterion=torch.nn.CrossEntropyLoss, optimizer=torch.optim.Adam, lr=1e-3,
                          max_epochs=args.epochs, batch_size=32, train_split=None, verbose=0)
net.fit(X, y)
print("done")
