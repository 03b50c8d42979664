"""AMP recipe, GPT on Tiny Shakespeare, fast twin: mixed precision training.

nanoGPT's shape (pre-LayerNorm blocks, causal self-attention through scaled_dot_product_attention, a 4x
GELU MLP, tied embeddings), AdamW(lr=1e-3). Under autocast the matmuls and the attention run in 16-bit
(bf16; fp16 with a loss scale on a T4), so the attention gets a flash or cuDNN kernel on sm_80+.
"""
import torch

from common import harness
from common.workloads import gpt

run = harness.start(__file__, __doc__)
model = gpt.model(run)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
batches = gpt.train_batches(run)
# bf16 where the GPU has it (sm_80+, and a CPU); fp16 below, which needs loss scaling (a T4)
amp_dtype = getattr(torch, run.profile.amp_dtype)  # from the compute capability, not torch's emulation
scaler = torch.amp.GradScaler(run.device.type, enabled=amp_dtype == torch.float16)  # no-op for bf16

for x, y in run.loop(batches):
    with run.phase("forward"), torch.autocast(run.device.type, dtype=amp_dtype):  # matmuls, attention in 16-bit
        loss = gpt.loss_of(model(x), y)  # autocast runs the cross-entropy in fp32
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()  # fp16: scale up so small gradients do not flush to zero
    with run.phase("optimizer"):
        scaler.step(optimizer)  # fp16: unscale, skip the step if a gradient overflowed
        scaler.update()  # fp16: adapt the scale
    run.log_loss(loss)

run.finish()
