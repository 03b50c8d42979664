"""DataLoader recipe, churn MLP on Telco, fast twin: batches sliced on the device.

The churn MLP, BCELoss, Adam(lr=1e-3), batch 64. The batches are the slow twin's, in the same order,
but each is one gather from a device permutation: a couple of ops per batch instead of 130.
"""
import torch

from common import data, harness
from common.workloads import churn

run = harness.start(__file__, __doc__)
features, targets = churn.train_tensors(run)
model = churn.ChurnMLP(features.shape[1]).to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = torch.nn.BCELoss()
batches = data.device_batches(run, features, targets)  # one gather per batch, on the device

for x, y in run.loop(batches):
    with run.phase("forward"):
        probs = model(x).squeeze(1)
        loss = criterion(probs, y)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    run.log_loss(loss)

run.finish()
