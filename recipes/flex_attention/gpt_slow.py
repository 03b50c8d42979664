"""FlexAttention recipe, GPT on Tiny Shakespeare, slow twin: the sliding window as a dense T x T mask.

nanoGPT's shape (pre-LayerNorm blocks, a 4x GELU MLP, tied embeddings), AdamW(lr=1e-3), bf16 autocast
where the device has bf16 (fp32 on a T4). Each position attends to itself and the `--window`-1 tokens
before it (Mistral's and Gemma's local attention). A boolean mask rules out flash attention: SDPA runs
a kernel that takes one (memory-efficient; cuDNN's on an H100), which scores every pair, allowed or not.
"""
import torch
import torch.nn.functional as F

from common import harness
from common.workloads import gpt

run = harness.start(__file__, __doc__)
window = gpt.window(run)
i = torch.arange(run.config.sizes["context"], device=run.device)
near = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < window)  # T x T: causal, at most window - 1 tokens back


def attention(q, k, v):  # dense: every query scores every key, then the mask discards most of them
    return F.scaled_dot_product_attention(q, k, v, attn_mask=near[:q.size(-2), :q.size(-2)])


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
