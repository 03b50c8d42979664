"""Precision recipe, churn MLP on Telco, fast twin: TF32 matmuls.

The churn MLP (the seed's layers), BCELoss, Adam(lr=1e-3), batch 64, the matmuls on TF32 tensor
cores (fp32 range, 10-bit mantissa).
"""
import torch

from common import data, harness
from common.workloads import churn

run = harness.start(__file__, __doc__)
torch.backends.cuda.matmul.fp32_precision = "tf32"  # TF32 tensor cores for matmuls: fp32 range, 10-bit mantissa
torch.backends.cudnn.conv.fp32_precision = "tf32"  # and for convolutions (sm_80+; the runner skips older GPUs)
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
