"""CUDA-graphs recipe, churn MLP on Telco, slow twin: an eager training step.

The churn MLP (the seed's layers), BCELoss, Adam(lr=1e-3), batch 64. An eager step: the host runs
about 400 ops and launches about 70 small kernels one by one, and the GPU, done with each in
microseconds, waits for the next: the step is host-bound. See the README.
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


def step(x, y):  # one training step
    with run.phase("forward"):
        probs = model(x).squeeze(1)
        loss = criterion(probs, y)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    return loss


for x, y in run.loop(batches):
    run.log_loss(step(x, y))

run.finish()
