"""A plain training script whose DataLoader asks for more worker processes than this machine has
cores, which torch warns about."""
import os

import torch
from torch.utils.data import DataLoader, TensorDataset

cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
data = TensorDataset(torch.randn(4096, 16), torch.randn(4096, 1))
loader = DataLoader(data, batch_size=16, num_workers=cores + 2)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
