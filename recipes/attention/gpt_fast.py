"""Attention recipe, GPT on Tiny Shakespeare, fast twin: fused attention (scaled_dot_product_attention).

nanoGPT's shape (pre-LayerNorm blocks, a 4x GELU MLP, tied embeddings), AdamW(lr=1e-3), bf16 autocast
where the device has bf16 (fp32 on a T4). Each head's attention is one call that PyTorch sends to a fused
kernel (flash, memory-efficient or cuDNN on a GPU; a fused CPU kernel): no T x T tensor is kept.
"""
import torch
import torch.nn.functional as F  # scaled_dot_product_attention

from common import harness
from common.workloads import gpt

run = harness.start(__file__, __doc__)


def attention(q, k, v):  # fused: one kernel, scores formed and consumed in tiles, never stored whole
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)  # the mask is the kernel's: no T x T tensor


model = gpt.model(run, attention)
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
