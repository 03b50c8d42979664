"""Fused-ops recipe, churn MLP on Telco, slow twin: PyTorch's default Adam.

The churn MLP (38 -> 512 -> 1024 -> 512 -> 256 -> 128 -> 1, ReLU + Dropout(0.3), Sigmoid), BCELoss,
batch 64; Adam(lr=1e-3) as PyTorch builds it by default: foreach (multi-tensor ops, a few kernels
per step of ops over all tensors) on CUDA, the for-loop (a handful of ops per tensor) on a CPU.
"""
import torch

from common import data, harness
from common.workloads import churn

run = harness.start(__file__, __doc__)
features, targets = churn.train_tensors(run)
model = churn.ChurnMLP(features.shape[1]).to(run.device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)  # PyTorch's default: foreach on CUDA
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
