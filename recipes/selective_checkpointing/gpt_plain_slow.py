"""Selective-checkpointing recipe, GPT on Tiny Shakespeare, slow twin of the second pair: no checkpointing.

nanoGPT's shape (pre-LayerNorm blocks, a 4x GELU MLP, tied embeddings), AdamW(lr=1e-3), bf16 autocast
where the device has bf16 (fp32 on a T4). Autograd keeps every activation the backward needs: the
fastest step and the largest memory, which the selective twin is measured against.
"""
import torch

from common import harness
from common.workloads import gpt

run = harness.start(__file__, __doc__)
model = gpt.model(run)  # no checkpointing: every activation kept for the backward
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
batches = gpt.train_batches(run)
# bf16 where the device has it (sm_80+, a CPU), as nanoGPT trains; a T4 has none: fp32 there
amp = torch.autocast(run.device.type, dtype=torch.bfloat16, enabled=run.profile.amp_dtype == "bfloat16")

for x, y in run.loop(batches):
    with run.phase("forward"):
        with amp:
            loss = gpt.loss_of(model(x), y)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    run.log_loss(loss)

run.finish()
