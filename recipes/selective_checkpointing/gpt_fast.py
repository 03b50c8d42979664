"""Selective-checkpointing recipe, GPT on Tiny Shakespeare, fast twin: matmuls kept, the rest recomputed.

nanoGPT's shape (pre-LayerNorm blocks, a 4x GELU MLP, tied embeddings), AdamW(lr=1e-3), bf16 autocast
where the device has bf16 (fp32 on a T4). Each block is checkpointed with a policy
(torch.utils.checkpoint.create_selective_checkpoint_contexts): the outputs of its matmuls and of its
attention are saved, except the MLP's last, which no backward reads; LayerNorm, GELU, the casts and the
residual adds are recomputed in the backward.
"""
import functools  # the policy's contexts, made per block

import torch
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts  # selective AC

from common import harness
from common.workloads import gpt

run = harness.start(__file__, __doc__)
aten = torch.ops.aten
KEEP = {aten.mm.default, aten.addmm.default, aten.bmm.default,  # the costly ops: save their outputs
        aten._scaled_dot_product_flash_attention.default, aten._scaled_dot_product_efficient_attention.default,
        aten._scaled_dot_product_cudnn_attention.default, aten._scaled_dot_product_flash_attention_for_cpu.default}


def policy(ctx, op, *args, **kwargs):  # save what is costly to recompute; recompute the cheap rest
    if op is aten.addmm.default and args[1].shape[-1] > args[2].shape[-1]:  # the MLP's way down (4C -> C): its
        return CheckpointPolicy.PREFER_RECOMPUTE  # output only meets the residual add, so no backward reads it
    return CheckpointPolicy.MUST_SAVE if op in KEEP else CheckpointPolicy.PREFER_RECOMPUTE  # per op, as it runs


model = gpt.checkpoint_blocks(gpt.model(run), functools.partial(create_selective_checkpoint_contexts, policy))
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
