"""Sync-removal recipe, churn MLP on Telco, slow twin: the host reads numbers every step.

The seed's ProblematicChurnModel (its forward calls `.item()` on the mean activation), BCELoss,
Adam(lr=1e-3), batch 512, and the seed's habit of `loss.item()` per step for the running loss.
Each `.item()` makes the host wait until the GPU has caught up, so the GPU idles while the host
prepares the next step.
"""
import torch

from common import data, harness
from common.workloads import churn

run = harness.start(__file__, __doc__)
features, targets = churn.train_tensors(run)
model = churn.ProblematicChurnModel(features.shape[1]).to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = torch.nn.BCELoss()
batches = data.device_batches(run, features, targets)
running_loss, mean_activation = 0.0, 0.0

for x, y in run.loop(batches):
    with run.phase("forward"):
        probs = model(x).squeeze(1)
        loss = criterion(probs, y)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    running_loss += loss.item()  # note: this is a sync point, every step
    mean_activation += model.last_mean_activation  # a float: the forward's .item() already synced
    run.log_loss(loss)

print(f"mean training loss {running_loss / run.steps_run:.4f}, "
      f"mean activation {mean_activation / run.steps_run:.4f}")
run.finish()
