"""Planted bottleneck for the diagnosis tests: a data loader made slow on purpose (150 ms per batch)."""
import time

import torch

from common import data, harness
from common.workloads import churn

run = harness.start(__file__, __doc__)
features, targets = churn.train_tensors(run)
model = churn.ChurnMLP(features.shape[1]).to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = torch.nn.BCELoss()


def slow_batches():
    for batch in data.device_batches(run, features, targets):
        time.sleep(0.15)  # the plant: a loader that takes 150 ms per batch
        yield batch


for x, y in run.loop(slow_batches()):
    with run.phase("forward"):
        loss = criterion(model(x).squeeze(1), y)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    run.log_loss(loss)

run.finish()
