"""Checkpointing recipe, churn MLP on Telco, fast twin: activations recomputed segment by segment.

The seed's layers (38 -> 512 -> 1024 -> 512 -> 256 -> 128 -> 1, ReLU + Dropout(0.3), Sigmoid), BCELoss,
Adam(lr=1e-3), at a batch size where activations dominate memory. Batches are sliced from a device
permutation so the pair measures the memory/compute trade and nothing else.
"""
import torch
from torch.utils.checkpoint import checkpoint_sequential  # keeps only segment inputs

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
        # 5 segments: the first 4 store only their input and rerun their forward during backward
        probs = checkpoint_sequential(model.network, 5, x, use_reentrant=False).squeeze(1)
        loss = criterion(probs, y)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    run.log_loss(loss)

run.finish()
