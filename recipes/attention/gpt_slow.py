"""Attention recipe, GPT on Tiny Shakespeare, slow twin: attention written by hand.

nanoGPT's shape (pre-LayerNorm blocks, a 4x GELU MLP, tied embeddings), AdamW(lr=1e-3), bf16 autocast
where the device has bf16 (fp32 on a T4). Each head's attention is four steps: a T x T matrix of scores,
the causal mask, a softmax, the weighted sum; the scores and the softmax are kept for the backward.
"""
import torch

from common import harness
from common.workloads import gpt

run = harness.start(__file__, __doc__)


def attention(q, k, v):  # by hand: scores, mask, softmax, weighted sum, each a T x T tensor
    T = q.size(-2)
    scores = q @ k.transpose(-2, -1) * q.size(-1) ** -0.5
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)  # causal: no position sees ahead
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v


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
