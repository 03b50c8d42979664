"""Selective-checkpointing recipe, GPT on Tiny Shakespeare, fast twin: matmuls kept, the rest recomputed (against none).

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
aten = torch.ops.aten  # the ops as the policy sees them: after autocast and SDPA's dispatch
KEEP = {aten.mm.default, aten.addmm.default, aten.bmm.default,  # the costly ops: save their outputs
        *(getattr(aten, f"_scaled_dot_product_{k}_attention").default for k in ("flash", "efficient", "cudnn")),  # GPU
        aten._scaled_dot_product_flash_attention_for_cpu.default}  # SDPA's fused kernels, on a GPU and on a CPU


def policy(ctx, op, *args, **kwargs):  # save what is costly to recompute; recompute the cheap rest
    down = op is aten.addmm.default and args[1].shape[-1] > args[2].shape[-1]  # MLP's 4C -> C: no backward reads it
    return CheckpointPolicy.MUST_SAVE if op in KEEP and not down else CheckpointPolicy.PREFER_RECOMPUTE  # as it runs


selective = functools.partial(create_selective_checkpoint_contexts, policy)  # the policy's two contexts, per block
model = gpt.checkpoint_blocks(gpt.model(run), selective)  # each block checkpointed under the policy
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
