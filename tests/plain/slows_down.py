"""A plain training loop whose steps get 100x slower once the warm-up is over, as when another job
starts on the machine: the doctor's timed stretch must still end near its --time."""
import time

import torch

torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
for step in range(10_000):
    loss = model(torch.randn(8, 16)).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    time.sleep(0.002 if step < 5 else 0.2)
