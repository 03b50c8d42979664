"""Checkpointing recipe, churn MLP on Telco, slow twin: every activation kept for the backward pass.

The seed's layers (38 -> 512 -> 1024 -> 512 -> 256 -> 128 -> 1, ReLU + Dropout(0.3), Sigmoid), BCELoss,
Adam(lr=1e-3), at a batch size where activations dominate memory. Batches are sliced from a device
permutation so the pair measures the memory/compute trade and nothing else.
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
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    run.log_loss(loss)

run.finish()
