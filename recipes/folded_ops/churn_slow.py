"""Folded-ops recipe, churn MLP on Telco, slow twin: the seed's needless ops in every forward.

The seed's ProblematicChurnModel (its monitoring statistic kept on the device, so that no sync
hides the effect) adds 1e-4, multiplies by 1.0001 and takes an unread mean in every forward: three
ops, each a kernel that reads and writes the batch. BCELoss, Adam(lr=1e-3), batch 64.
"""
import torch

from common import data, harness
from common.workloads import churn

run = harness.start(__file__, __doc__)
features, targets = churn.train_tensors(run)
model = churn.ProblematicChurnModel(features.shape[1], host_sync=False).to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = torch.nn.BCELoss()
batches = data.device_batches(run, features, targets)

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
