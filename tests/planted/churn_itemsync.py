"""Planted bottleneck for the diagnosis tests: a `.item()` in every step, and nothing else wrong."""
import torch

from common import data, harness
from common.workloads import churn

run = harness.start(__file__, __doc__)
features, targets = churn.train_tensors(run)
model = churn.ChurnMLP(features.shape[1]).to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = torch.nn.BCELoss()
total = 0.0

for x, y in run.loop(data.device_batches(run, features, targets)):
    with run.phase("forward"):
        loss = criterion(model(x).squeeze(1), y)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    total += loss.item()  # the plant: a host sync every step
    run.log_loss(loss)

run.finish()
