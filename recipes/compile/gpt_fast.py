"""Compile recipe, GPT on Tiny Shakespeare, fast twin: each block compiled (regional compilation).

nanoGPT's shape (pre-LayerNorm blocks, causal self-attention through scaled_dot_product_attention, a 4x
GELU MLP, tied embeddings), AdamW(lr=1e-3), bf16 autocast where the device has bf16 (fp32 on a T4).
Each transformer block is compiled on its own, as torchtitan does: the blocks share their code, so one
compilation serves them all, and Inductor fuses LayerNorm, the GELU and the residual adds around the
matmuls and the attention kernel.
"""
import torch

from common import harness
from common.workloads import gpt

run = harness.start(__file__, __doc__)
model = gpt.model(run)
for block in model.blocks:  # regional: the blocks, not the whole model; one graph for every block
    block.compile(fullgraph=True)  # in place, the same parameters; fullgraph: a graph break is an error
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
