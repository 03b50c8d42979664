"""A plain training script bound by its DataLoader: every sample sleeps 2 ms in __getitem__ and the
loader has no workers, so a batch of 16 waits about 32 ms for a step that computes for well under 1."""
import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset


class SlowSamples(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        time.sleep(0.002)  # decoding, augmenting, reading a file...
        return torch.randn(32, generator=torch.Generator().manual_seed(i)), torch.tensor(float(i % 2))


parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=100)
args = parser.parse_args()
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(SlowSamples(), batch_size=16, shuffle=True)
for epoch in range(args.epochs):
    for x, y in loader:
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x).squeeze(1), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
