"""AMP recipe, churn MLP on Telco, fast twin: mixed precision training.

The seed's layers (38 -> 512 -> 1024 -> 512 -> 256 -> 128 -> 1, ReLU + Dropout(0.3), Sigmoid) without
its deliberate extra ops, BCELoss, Adam(lr=1e-3), batch 64. Batches are sliced from a device
permutation so the pair measures the arithmetic's precision and nothing else.
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
# bf16 where the GPU has it (sm_80+, and a CPU); fp16 below, which needs loss scaling (a T4)
amp_dtype = getattr(torch, run.profile.amp_dtype)  # from the compute capability, not torch's emulation
scaler = torch.amp.GradScaler(run.device.type, enabled=amp_dtype == torch.float16)  # no-op for bf16

for x, y in run.loop(batches):
    with run.phase("forward"):
        with torch.autocast(run.device.type, dtype=amp_dtype):  # the Linear layers in 16-bit
            probs = model(x).squeeze(1)
        loss = criterion(probs.float(), y)  # BCELoss is unsafe under autocast: fp32, outside it
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()  # fp16: scale up so small gradients do not flush to zero
    with run.phase("optimizer"):
        scaler.step(optimizer)  # fp16: unscale, skip the step if a gradient overflowed
        scaler.update()  # fp16: adapt the scale
    run.log_loss(loss)

run.finish()
