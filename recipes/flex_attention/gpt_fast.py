"""FlexAttention recipe, GPT on Tiny Shakespeare, fast twin: the sliding window as a block mask, compiled.

nanoGPT's shape (pre-LayerNorm blocks, a 4x GELU MLP, tied embeddings), AdamW(lr=1e-3), bf16 autocast
where the device has bf16 (fp32 on a T4). Each position attends to itself and the `--window`-1 tokens
before it (Mistral's and Gemma's local attention). A block mask lists the 128 x 128 tiles that hold an
allowed pair, and the kernel Inductor generates for FlexAttention scores those tiles only.
"""
import functools  # functools.cache: one block mask per sequence length

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # the mask as a rule, its kernel

from common import harness
from common.workloads import gpt

run = harness.start(__file__, __doc__)
window = gpt.window(run)
flex = torch.compile(flex_attention, dynamic=False)  # Inductor's fused kernel (uncompiled, it scores every pair)


def near(b, h, q, k):  # the mask as a rule, which FlexAttention evaluates per tile
    return (q >= k) & (q - k < window)  # causal, and at most window - 1 tokens back


# which 128 x 128 tiles hold an allowed pair, one mask for every batch and head, per length (the causal check's)
blocks = functools.cache(lambda T: create_block_mask(near, None, None, T, T, device=run.device))


def attention(q, k, v):  # sparse: only the tiles within the window are scored
    return flex(q, k, v, block_mask=blocks(q.size(-2)))  # the mask is the kernel's: no T x T tensor


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
