"""Sync-removal recipe, churn MLP on Telco, fast twin: numbers stay on the device, read once.

The seed's ProblematicChurnModel with its monitoring statistic kept on the device, BCELoss,
Adam(lr=1e-3), batch 512; the running loss is a device tensor read once after the loop, so the host
queues step after step without waiting for the GPU.
"""
import torch

from common import data, harness
from common.workloads import churn

run = harness.start(__file__, __doc__)
features, targets = churn.train_tensors(run)
model = churn.ProblematicChurnModel(features.shape[1], host_sync=False).to(run.device)  # no .item() in forward
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = torch.nn.BCELoss()
batches = data.device_batches(run, features, targets)
running_loss, mean_activation = torch.zeros((), device=run.device), torch.zeros((), device=run.device)  # device sums

for x, y in run.loop(batches):
    with run.phase("forward"):
        probs = model(x).squeeze(1)
        loss = criterion(probs, y)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    running_loss += loss.detach()  # queued on the device: no wait
    mean_activation += model.last_mean_activation  # a device tensor: no wait
    run.log_loss(loss)

print(f"mean training loss {running_loss.item() / run.steps_run:.4f}, "  # one sync, at the end
      f"mean activation {mean_activation.item() / run.steps_run:.4f}")  # and one for this sum
run.finish()
