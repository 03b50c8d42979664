"""AMP recipe, GPT on Tiny Shakespeare, slow twin: fp32 training.

nanoGPT's shape (pre-LayerNorm blocks, causal self-attention through scaled_dot_product_attention, a 4x
GELU MLP, tied embeddings), AdamW(lr=1e-3). Every matmul and the attention run in fp32: on a GPU the
attention gets the memory-efficient kernel (flash and cuDNN need 16-bit inputs).
"""
import torch

from common import harness
from common.workloads import gpt

run = harness.start(__file__, __doc__)
model = gpt.model(run)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
batches = gpt.train_batches(run)

for x, y in run.loop(batches):
    with run.phase("forward"):
        loss = gpt.loss_of(model(x), y)
    with run.phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with run.phase("optimizer"):
        optimizer.step()
    run.log_loss(loss)

run.finish()
