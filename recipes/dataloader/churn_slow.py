"""DataLoader recipe, churn MLP on Telco, slow twin: a DataLoader over tensors already on the GPU.

The churn MLP, BCELoss, Adam(lr=1e-3), batch 64. `DataLoader(TensorDataset(features, targets))`
fetches each of the 64 rows with its own indexing op and then stacks them: 130 small ops per batch,
issued one by one from Python, for data that already sit on the device.
"""
import torch
from torch.utils.data import TensorDataset

from common import data, harness
from common.workloads import churn

run = harness.start(__file__, __doc__)
features, targets = churn.train_tensors(run)
model = churn.ChurnMLP(features.shape[1]).to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
criterion = torch.nn.BCELoss()
batches = data.loader(run, TensorDataset(features, targets))

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
