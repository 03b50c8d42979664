"""A plain script that learns fast (Adam on a small fixed set), a little noisy from run to run (its
data carry a trace of noise drawn from the operating system, not from a seed), over a DataLoader
whose dataset refuses to be read from worker processes: the doctor's workers fix crashes it."""
import os

import torch
from torch.utils.data import DataLoader, Dataset

MAIN = os.getpid()
NOISE = int.from_bytes(os.urandom(4), "little")  # no seed reaches this: each run differs a little


class OnlyHere(Dataset):
    """Samples that can only be read in the process that made them (an open handle, a GPU tensor...)."""

    def __init__(self):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(256, 16, generator=g)
        self.x += 1e-4 * torch.randn(256, 16, generator=torch.Generator().manual_seed(NOISE))
        self.y = (self.x[:, :1] > 0).float()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if os.getpid() != MAIN:
            raise RuntimeError("this dataset cannot be read from a worker process")
        return self.x[i], self.y[i]


model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
loader = DataLoader(OnlyHere(), batch_size=32, shuffle=True)
for _epoch in range(1000):
    for x, y in loader:
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
