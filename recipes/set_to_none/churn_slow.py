"""Set-to-none recipe, churn MLP on Telco, slow twin: gradients zeroed in place every step.

The churn MLP (the seed's layers), BCELoss, Adam(lr=1e-3), batch 64.
`optimizer.zero_grad(set_to_none=False)`: one fill kernel per parameter tensor, and the backward
adds into the zeroed gradients.
"""
import torch

from common import data, harness
from common.workloads import churn

run = harness.start(__file__, __doc__)
features, targets = churn.train_tensors(run)
model = churn.ChurnMLP(features.shape[1]).to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = torch.nn.BCELoss()
batches = data.device_batches(run, features, targets)

for x, y in run.loop(batches):
    with run.phase("forward"):
        probs = model(x).squeeze(1)
        loss = criterion(probs, y)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    run.log_loss(loss)

run.finish()
